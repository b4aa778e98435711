package notify

import (
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/dsdtest"
	"github.com/stallwatch/stallwatch/internal/intaketest"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/watchdog"
)

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sendOne acts as a watchdog would on one stall and its capture, and
// returns the stall's event and the upload.
func sendOne(t *testing.T, s *Stack, dsd *dsdtest.Server, intake *intaketest.Server) (*dsdtest.Event, *intaketest.Upload) {
	t.Helper()
	now := time.Now()
	h := s.For(Target{PID: os.Getpid(), Process: "julia", Service: s.Service})
	stall := watchdog.StallInfo{Start: now.Add(-10 * time.Second), For: 10 * time.Second, Source: "file x"}
	h(watchdog.Event{Kind: watchdog.StallBegan, Stall: stall})
	var ev *dsdtest.Event
	if dsd != nil {
		msgs := dsd.Collect(t, 10*time.Second, func(m []dsdtest.Message) bool { return len(m) >= 3 })
		for _, m := range msgs {
			if m.Event != nil {
				ev = m.Event
			}
		}
	}
	var up *intaketest.Upload
	if intake != nil {
		tr := model.Trigger{Kind: model.Stall, At: now, LastBeat: stall.Start, StallFor: stall.For}
		info := capdir.NewInfo(model.Target{PID: os.Getpid()}, tr)
		info.Start, info.End = now.Add(-time.Second), now
		p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu-samples", Unit: "count"}}}
		dir := intaketest.WriteCapture(t, t.TempDir(), info, p, nil)
		h(watchdog.Event{Kind: watchdog.CaptureDone, Stall: stall, Trigger: &tr, Result: &model.Result{Dir: dir, Trigger: tr, Info: info}})
		up = intake.Wait(t, 1, 10*time.Second)[0]
	}
	return ev, up
}

// TestSetupFromEnvironment: Datadog's variables alone turn alerts and
// uploads on and name the service; flags given win over them.
func TestSetupFromEnvironment(t *testing.T) {
	dsd := dsdtest.ListenUDP(t)
	intake := intaketest.Start(t)
	env := map[string]string{
		"DD_AGENT_HOST": "127.0.0.1", "DD_DOGSTATSD_PORT": port(t, dsd.Addr), "DD_TRACE_AGENT_PORT": port(t, intake.URL),
		"DD_SERVICE": "bank", "DD_ENV": "prod", "DD_VERSION": "1.2.3", "DD_TAGS": "team:payments tier:1",
	}
	s, err := Setup(Options{Getenv: func(k string) string { return env[k] }, QueueDir: filepath.Join(t.TempDir(), QueueDirName), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ev, up := sendOne(t, s, dsd, intake)
	s.Close(5 * time.Second)
	for _, want := range []string{"service:bank", "env:prod", "version:1.2.3", "team:payments", "tier:1"} {
		if !slices.Contains(ev.Tags, want) {
			t.Errorf("alert tags %v lack %s", ev.Tags, want)
		}
		if !slices.Contains(up.Tags, want) {
			t.Errorf("upload tags %v lack %s", up.Tags, want)
		}
	}
	if !strings.HasPrefix(ev.Title, "bank (pid") {
		t.Errorf("title %q does not name DD_SERVICE", ev.Title)
	}

	// Flags override: another DogStatsD socket, another agent, another
	// service and tags; DD_ENV still fills --env.
	dsd2 := dsdtest.ListenUnixgram(t)
	intake2 := intaketest.StartUnix(t)
	s, err = Setup(Options{Statsd: dsd2.Addr, Upload: intake2.URL, Service: "ledger", Tags: "owner:ops",
		Getenv: func(k string) string { return env[k] }, QueueDir: filepath.Join(t.TempDir(), QueueDirName), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ev, up = sendOne(t, s, dsd2, intake2)
	s.Close(5 * time.Second)
	for _, tags := range [][]string{ev.Tags, up.Tags} {
		if !slices.Contains(tags, "service:ledger") || !slices.Contains(tags, "owner:ops") || !slices.Contains(tags, "env:prod") ||
			slices.Contains(tags, "service:bank") || slices.Contains(tags, "team:payments") {
			t.Errorf("with flags, tags %v", tags)
		}
	}
	for len(dsd.C) > 0 {
		if d := <-dsd.C; strings.Contains(string(d.Data), "ledger") {
			t.Errorf("the environment's socket got a datagram although --statsd was given: %q", d.Data)
		}
	}
	if n := len(intake.Uploads()); n != 1 {
		t.Errorf("the environment's agent got %d uploads, want only the first", n)
	}
}

// TestSetupURLVariables: DD_DOGSTATSD_URL and DD_TRACE_AGENT_URL alone,
// with unix sockets, as the agent's own sockets are.
func TestSetupURLVariables(t *testing.T) {
	dsd := dsdtest.ListenUnixgram(t)
	intake := intaketest.StartUnix(t)
	env := map[string]string{"DD_DOGSTATSD_URL": "unix://" + strings.TrimPrefix(dsd.Addr, "unixgram://"), "DD_TRACE_AGENT_URL": intake.URL}
	s, err := Setup(Options{Getenv: func(k string) string { return env[k] }, QueueDir: filepath.Join(t.TempDir(), QueueDirName), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(5 * time.Second)
	if ev, up := sendOne(t, s, dsd, intake); ev == nil || up == nil {
		t.Fatal("nothing arrived")
	}
}

// TestSetupNothing: with no flag and no variable, nothing is sent and
// nothing is said.
func TestSetupNothing(t *testing.T) {
	var logs testutil.Buffer
	s, err := Setup(Options{Getenv: func(string) string { return "" }, QueueDir: filepath.Join(t.TempDir(), QueueDirName), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if s.Alerts.Enabled() || s.Uploader != nil || s.Queue != nil || s.Hooks != nil {
		t.Errorf("something is on: alerts %v, uploader %v, hooks %v", s.Alerts.Enabled(), s.Uploader, s.Hooks)
	}
	s.For(Target{PID: 1})(watchdog.Event{Kind: watchdog.StallBegan})
	s.Close(time.Second)
	if logs.String() != "" {
		t.Errorf("said: %s", logs.String())
	}
}

// TestSetupBadAddress: a malformed address is an error naming it.
func TestSetupBadAddress(t *testing.T) {
	for _, o := range []Options{{Statsd: "http://x"}, {Upload: "udp://x:1"}} {
		o.Getenv = func(string) string { return "" }
		o.QueueDir = t.TempDir()
		if _, err := Setup(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
