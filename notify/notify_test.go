package notify

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/dsdtest"
	"github.com/stallwatch/stallwatch/internal/intaketest"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify/alert"
	"github.com/stallwatch/stallwatch/notify/hook"
	"github.com/stallwatch/stallwatch/notify/spool"
	"github.com/stallwatch/stallwatch/notify/upload"
	"github.com/stallwatch/stallwatch/watchdog"
)

// diskCapturer stands in for the capture package (which needs
// perf_event_open): each capture is a real capture directory, written
// after hold.
type diskCapturer struct {
	t    testing.TB
	root string
	hold time.Duration
	n    atomic.Int32
}

func (c *diskCapturer) Capture(ctx context.Context, tr model.Trigger) (*model.Result, error) {
	select {
	case <-time.After(c.hold):
	case <-ctx.Done():
	}
	c.n.Add(1)
	now := time.Now()
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu-samples", Unit: "count"}}, TimeNanos: now.UnixNano()}
	info := capdir.NewInfo(model.Target{PID: os.Getpid(), Executable: "/usr/bin/julia"}, tr)
	info.Start, info.End = tr.At.Add(-time.Second), now
	info.Counts.Samples = 10
	snap := &model.Snapshot{PID: os.Getpid(), Time: tr.At}
	for _, tid := range []int{11, 12} {
		snap.Threads = append(snap.Threads, model.Thread{TID: tid, Name: "worker", State: 'S'})
	}
	snap.Locks.Cycles = [][]int{{11, 12}}
	dir := intaketest.WriteCapture(c.t, c.root, info, p, snap)
	d, err := capdir.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return &model.Result{Dir: dir, Trigger: tr, Info: d.Info}, nil
}

func (c *diskCapturer) Recovered(*model.Result, time.Duration) error { return nil }

// beater replaces a heartbeat file every 20 ms until stopped.
func beater(t testing.TB, path string) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			os.WriteFile(path+".tmp", []byte(fmt.Sprint(i)), 0o644)
			os.Rename(path+".tmp", path)
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop)
	return stop
}

// TestStallToAlertsHooksUploads runs a real watchdog on a heartbeat file
// through one stall and its recovery, with alerts to a real UDP socket, an
// --on-capture hook that hangs past its bound, an --on-recover hook, and
// uploads through the spool to a stand-in intake; then a second stall,
// to show the hung hook held nothing up.
func TestStallToAlertsHooksUploads(t *testing.T) {
	tmp := t.TempDir()
	beat := filepath.Join(tmp, "beat")
	dsd := dsdtest.ListenUDP(t)
	intake := intaketest.Start(t)
	var logs testutil.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	ac, err := alert.New(alert.Config{Addr: dsd.Addr, Tags: []string{"service:bank", "env:test"}, Hostname: "web-1", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	hooks := hook.New(hook.Config{Timeout: 500 * time.Millisecond, Logger: log})
	recovered := filepath.Join(tmp, "recovered.env")
	u, err := upload.New(upload.Config{URL: intake.URL, Tags: []string{"service:bank"}})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := spool.Open(spool.Config{Dir: filepath.Join(tmp, ".queue"), Deliver: Deliver(u), Retryable: Retryable, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sp.Run(ctx)

	n := New(Config{Alerts: ac, Hooks: hooks, Uploads: sp, Logger: log, Host: "web-1",
		OnCapture: "sleep 1000",
		OnRecover: "env | grep ^STALLWATCH_ > '" + recovered + "'"})
	defer n.Close()
	capt := &diskCapturer{t: t, root: filepath.Join(tmp, "out"), hold: 200 * time.Millisecond}
	const stallAfter = 500 * time.Millisecond
	wd, err := watchdog.New(watchdog.Config{
		PID: 0, Sources: []watchdog.Source{&watchdog.File{Path: beat, Poll: watchdog.PollInterval(stallAfter)}},
		StallAfter: stallAfter, RecaptureAfter: time.Hour, MaxCaptures: 6, Capturer: capt, Logger: log,
		Events: n.For(Target{PID: 4242, Process: "julia", Service: "bank", Tags: []string{"rule:julia"}}), ReportEvery: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- wd.Run(ctx) }()

	stop := beater(t, beat)
	if err := testutil.Eventually(10*time.Second, func() bool { return strings.Contains(logs.String(), "heartbeat healthy") }); err != nil {
		t.Fatal("the watchdog saw no beat")
	}
	stop()

	// The stall: error event, service check critical, stall.active 1.
	msgs := dsd.Collect(t, 10*time.Second, func(m []dsdtest.Message) bool { return len(m) >= 3 })
	var stallEv *dsdtest.Event
	for _, m := range msgs {
		if m.Event != nil {
			stallEv = m.Event
		}
	}
	if stallEv == nil || stallEv.AlertType != "error" || !strings.Contains(stallEv.Title, "bank (pid 4242) stalled") {
		t.Fatalf("stall event: %+v", msgs)
	}
	if v, _ := dsdtest.Tag(stallEv.Tags, "rule"); v != "julia" {
		t.Errorf("the target's tags are not on its alerts: %v", stallEv.Tags)
	}
	// The capture: counted, an event in the stall's thread, uploaded.
	msgs = dsd.Collect(t, 10*time.Second, func(m []dsdtest.Message) bool { return len(m) >= 3 })
	var capEv *dsdtest.Event
	for _, m := range msgs {
		if m.Event != nil {
			capEv = m.Event
		}
	}
	if capEv == nil || capEv.AggregationKey != stallEv.AggregationKey || !strings.Contains(capEv.Text, filepath.Join(tmp, "out")) {
		t.Fatalf("capture event: %+v", capEv)
	}
	if !strings.Contains(capEv.Text, "DEADLOCK: tid 11") {
		t.Errorf("the capture event lacks the top finding: %q", capEv.Text)
	}
	got := intake.Wait(t, 1, 10*time.Second)[0]
	if v, _ := got.Tag("rule"); v != "julia" {
		t.Errorf("the target's tags are not on its upload: %v", got.Tags)
	}
	if v, _ := got.Tag("runtime"); v != "julia" {
		t.Errorf("upload tags %v", got.Tags)
	}

	// Recovery while the on-capture hook still hangs.
	stop = beater(t, beat)
	msgs = dsd.Collect(t, 10*time.Second, func(m []dsdtest.Message) bool { return len(m) >= 4 })
	var recEv *dsdtest.Event
	for _, m := range msgs {
		if m.Event != nil {
			recEv = m.Event
		}
	}
	if recEv == nil || recEv.AlertType != "success" || recEv.AggregationKey != stallEv.AggregationKey {
		t.Fatalf("recovery event: %+v", recEv)
	}
	if err := testutil.Eventually(10*time.Second, func() bool {
		data, err := os.ReadFile(recovered)
		return err == nil && strings.Contains(string(data), "STALLWATCH_EVENT=recover") && strings.Contains(string(data), "STALLWATCH_CAPTURE_DIR="+filepath.Join(tmp, "out")) &&
			strings.Contains(string(data), "STALLWATCH_TOP_FINDING=DEADLOCK: tid 11")
	}); err != nil {
		t.Errorf("--on-recover did not run with the stall's capture in its environment")
	}
	if err := testutil.Eventually(10*time.Second, func() bool { return hooks.Stats().Killed == 1 }); err != nil {
		t.Errorf("the hung --on-capture hook was not killed: %+v", hooks.Stats())
	}

	// A second stall is caught and captured as the first.
	stop()
	if err := testutil.Eventually(10*time.Second, func() bool { return capt.n.Load() == 2 }); err != nil {
		t.Fatalf("no second capture")
	}
	intake.Wait(t, 2, 10*time.Second)
	cancel()
	<-runDone
	n.Close()
	hooks.Close(time.Second)
	if n.Dropped() != 0 {
		t.Errorf("%d events dropped", n.Dropped())
	}
}

// TestTargetHooks: a target's own hook commands (a daemon rule's) run in
// place of the process-wide ones; a target without them runs those.
func TestTargetHooks(t *testing.T) {
	tmp := t.TempDir()
	var logs testutil.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	hooks := hook.New(hook.Config{Timeout: 10 * time.Second, Logger: log})
	defer hooks.Close(time.Second)
	written := func(name string) string { return "env | grep ^STALLWATCH_ > '" + filepath.Join(tmp, name) + "'" }
	// The process-wide hooks name their file by the event's pid.
	byPID := func(name string) string {
		return "env | grep ^STALLWATCH_ > '" + filepath.Join(tmp, name) + "-'\"$STALLWATCH_PID\""
	}
	n := New(Config{Hooks: hooks, Logger: log, Host: "web-1", OnCapture: byPID("host-capture"), OnRecover: byPID("host-recover")})
	defer n.Close()

	capt := &diskCapturer{t: t, root: filepath.Join(tmp, "out")}
	own := n.For(Target{PID: 101, Process: "julia", Service: "jobs",
		OnCapture: written("own-capture"), OnRecover: written("own-recover")})
	plain := n.For(Target{PID: 102, Process: "node", Service: "api"})
	for _, send := range []func(watchdog.Event){own, plain} {
		res, err := capt.Capture(context.Background(), model.Trigger{Kind: model.Stall, At: time.Now(), StallFor: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		send(watchdog.Event{Kind: watchdog.CaptureDone, Result: res})
		send(watchdog.Event{Kind: watchdog.Recovered, Stall: watchdog.StallInfo{Start: time.Now().Add(-3 * time.Second), For: 3 * time.Second},
			Captures: []*model.Result{res}})
	}
	want := map[string][]string{
		"own-capture":      {"STALLWATCH_EVENT=capture", "STALLWATCH_PID=101", "STALLWATCH_SERVICE=jobs"},
		"own-recover":      {"STALLWATCH_EVENT=recover", "STALLWATCH_PID=101", "STALLWATCH_STALL_SECONDS=3"},
		"host-capture-102": {"STALLWATCH_EVENT=capture", "STALLWATCH_PID=102", "STALLWATCH_SERVICE=api"},
		"host-recover-102": {"STALLWATCH_EVENT=recover", "STALLWATCH_PID=102"},
	}
	for name, lines := range want {
		path := filepath.Join(tmp, name)
		if err := testutil.Eventually(10*time.Second, func() bool {
			data, err := os.ReadFile(path)
			if err != nil {
				return false
			}
			for _, l := range lines {
				if !strings.Contains(string(data), l+"\n") {
					return false
				}
			}
			return true
		}); err != nil {
			data, _ := os.ReadFile(path)
			t.Errorf("%s: want %q in\n%s\nlog:\n%s", name, lines, data, logs.String())
		}
	}
	// Every hook started has been waited for above (its file is
	// complete only once it ran); none ran for the other target.
	n.Close()
	hooks.Close(10 * time.Second)
	for _, name := range []string{"host-capture-101", "host-recover-101"} {
		if _, err := os.Stat(filepath.Join(tmp, name)); err == nil {
			t.Errorf("the process-wide hook ran for the target with its own: %s", name)
		}
	}
	if st := hooks.Stats(); st.Started != 4 {
		t.Errorf("hooks started %+v, want 4", st)
	}
}
