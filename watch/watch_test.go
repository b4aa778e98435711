package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/continuous"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/watchdog"
)

// TestSources: the heartbeats of the settings, made for one target as
// both `watch` and the daemon get them: {pid} and {root} expanded, every
// poll at the interval stall-after asks for, the HTTP probe's failures
// logged, the progress read by the shared poller with the target's start
// time.
func TestSources(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	poller := watchdog.NewPoller()
	h := Heartbeat{
		Files: []string{"/run/app-{pid}.beat", "{root}/tmp/beat"},
		HTTP:  "http://127.0.0.1:8080/health/{pid}", HTTPInterval: 3 * time.Second, HTTPTimeout: time.Second,
		Proc: true,
	}
	srcs, err := sources(&h, 10*time.Second, target{pid: 4242, start: 77}, poller, NewTaps(log), log)
	if err != nil {
		t.Fatal(err)
	}
	poll := watchdog.PollInterval(10 * time.Second)
	want := []string{"file /run/app-4242.beat", "file /proc/4242/root/tmp/beat", "http http://127.0.0.1:8080/health/4242", "proc 4242"}
	if len(srcs) != len(want) {
		t.Fatalf("%d sources, want %d: %v", len(srcs), len(want), srcs)
	}
	for i, s := range srcs {
		if s.String() != want[i] {
			t.Errorf("source %d is %q, want %q", i, s, want[i])
		}
		switch s := s.(type) {
		case *watchdog.File:
			if s.Poll != poll {
				t.Errorf("%s polls every %v, want %v", s, s.Poll, poll)
			}
		case *watchdog.HTTP:
			if s.Logger != log || s.Interval != 3*time.Second || s.Timeout != time.Second {
				t.Errorf("%s: logger %p (want %p), interval %v, timeout %v", s, s.Logger, log, s.Interval, s.Timeout)
			}
		case *watchdog.Progress:
			if s.Start != 77 || s.Poller != poller || s.Interval != poll {
				t.Errorf("%s: start %d, poller %p (want %p), interval %v", s, s.Start, s.Poller, poller, s.Interval)
			}
		default:
			t.Errorf("source %d is a %T", i, s)
		}
	}
}

// startSleeper starts a process that sleeps until the test ends.
func startSleeper(t *testing.T) *testutil.Target {
	t.Helper()
	tg := testutil.Start(t, testutil.BuildGo(t, "sleeper"))
	tg.WaitLine(t, "ready", 10*time.Second)
	return tg
}

// quick are capture settings for a capture of 100 ms under t's own
// directory, without a flight recorder.
func quick(t *testing.T) Settings {
	return Settings{
		Heartbeat:  Heartbeat{Proc: true},
		StallAfter: time.Minute, RecaptureAfter: time.Minute, MaxCaptures: 6,
		Capture: capture.Config{Out: t.TempDir(), CaptureFor: 100 * time.Millisecond, NoFlightRecorder: true, NoOffCPU: true},
	}
}

func (s *sessions) isOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess != nil
}

// TestSessionWithoutFlightRecorder: a session that samples nothing
// between captures opens at the first capture and closes after idle.
func TestSessionWithoutFlightRecorder(t *testing.T) {
	testutil.RequirePerf(t)
	tg := startSleeper(t)
	w, err := New(Config{PID: tg.Pid, Settings: quick(t), SessionIdle: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	if w.sess.isOpen() {
		t.Fatal("Open opened a session that has no flight recorder to run")
	}
	res, err := w.sess.Capture(context.Background(), model.Trigger{Kind: model.Manual, At: time.Now()})
	if err != nil || res == nil || res.Dir == "" {
		t.Fatalf("capture: %+v, %v", res, err)
	}
	if err := testutil.Eventually(10*time.Second, func() bool { return !w.sess.isOpen() }); err != nil {
		t.Fatal("the session was still open 10 s after its capture, with an idle time of 50 ms")
	}
}

// TestSessionWithFlightRecorder: a session with a flight recorder opens
// when the watch starts and is never closed for being idle.
func TestSessionWithFlightRecorder(t *testing.T) {
	testutil.RequirePerf(t)
	tg := startSleeper(t)
	s := quick(t)
	s.Capture.NoFlightRecorder, s.Capture.BaselineFreq = false, 49
	w, err := New(Config{PID: tg.Pid, Settings: s, SessionIdle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	if !w.sess.isOpen() {
		t.Fatal("Open did not open the session of a flight recorder")
	}
	if _, err := w.sess.Capture(context.Background(), model.Trigger{Kind: model.Manual, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	w.sess.mu.Lock()
	idle := w.sess.timer != nil
	w.sess.mu.Unlock()
	if idle || !w.sess.isOpen() {
		t.Errorf("after a capture the flight recorder's session is closed (%v) or waits to close (%v)", !w.sess.isOpen(), idle)
	}
}

// TestSessionWhileProfiling: a continuous profile keeps the session
// open without a flight recorder; dropped, it lets the session close
// when idle, its last period cut; asked for again, it opens the session
// and begins again.
func TestSessionWhileProfiling(t *testing.T) {
	testutil.RequirePerf(t)
	tg := startSleeper(t)
	prof, err := continuous.Start(continuous.Config{Dir: filepath.Join(t.TempDir(), continuous.DirName), Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer prof.Close()
	s := quick(t)
	s.ProfilePeriod, s.Capture.Profile = time.Minute, true
	var mu sync.Mutex
	var begun []string
	w, err := New(Config{PID: tg.Pid, Settings: s, SessionIdle: time.Millisecond, Profiler: prof, Process: "sleeper",
		ProfileBegun: func(dir string) { mu.Lock(); defer mu.Unlock(); begun = append(begun, dir) }})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	began := func() int { mu.Lock(); defer mu.Unlock(); return len(begun) }
	if err := w.Open(); err != nil {
		t.Fatal(err)
	}
	if !w.sess.isOpen() || began() != 1 || !w.Profiling() {
		t.Fatalf("after Open: session open %v, profile begun %d times, profiling %v", w.sess.isOpen(), began(), w.Profiling())
	}
	if _, err := w.sess.Capture(context.Background(), model.Trigger{Kind: model.Manual, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if !w.sess.isOpen() {
		t.Fatal("a capture closed the session of a continuous profile")
	}
	w.DropProfile("profile_degraded", "dropped", "a test")
	if err := testutil.Eventually(10*time.Second, func() bool { return !w.sess.isOpen() }); err != nil {
		t.Fatal("the session was still open 10 s after its profile was dropped, with an idle time of 1 ms")
	}
	if w.Profiling() {
		t.Error("Profiling after DropProfile")
	}
	periods, _ := filepath.Glob(filepath.Join(begun[0], "*"))
	if len(periods) == 0 {
		t.Errorf("no period written in %s when the profile was dropped", begun[0])
	}
	w.ProfileAt(0, false, "", "", "")
	if err := testutil.Eventually(10*time.Second, func() bool { return w.sess.isOpen() && began() == 2 }); err != nil {
		t.Fatalf("asked for again, the profile: session open %v, begun %d times", w.sess.isOpen(), began())
	}
}

// gateFunc admits captures as its function says.
type gateFunc func(ctx context.Context, tr model.Trigger) (func(*model.Result, error), error)

func (g gateFunc) Admit(ctx context.Context, tr model.Trigger) (func(*model.Result, error), error) {
	return g(ctx, tr)
}

// TestGate: a capture the gate refuses opens nothing and gives the gate's
// error; one it admits is handed back to it once written.
func TestGate(t *testing.T) {
	testutil.RequirePerf(t)
	tg := startSleeper(t)
	errFull := errors.New("every slot is taken")
	var mu sync.Mutex
	var admitted []*model.Result
	refuse := true
	g := gateFunc(func(ctx context.Context, tr model.Trigger) (func(*model.Result, error), error) {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			return nil, errFull
		}
		return func(res *model.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			admitted = append(admitted, res)
		}, nil
	})
	w, err := New(Config{PID: tg.Pid, Settings: quick(t), Gate: g})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	tr := model.Trigger{Kind: model.Stall, At: time.Now()}
	if _, err := w.sess.Capture(context.Background(), tr); !errors.Is(err, errFull) || w.sess.isOpen() {
		t.Fatalf("a capture the gate refused: %v, session open %v", err, w.sess.isOpen())
	}
	mu.Lock()
	refuse = false
	mu.Unlock()
	res, err := w.sess.Capture(context.Background(), tr)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(admitted) != 1 || admitted[0] != res {
		t.Errorf("the gate was handed %v, want the capture %v", admitted, res)
	}
}

// TestRunEndsWhenTheTargetExits: Run gives ErrTargetExited once the
// target is gone.
func TestRunEndsWhenTheTargetExits(t *testing.T) {
	testutil.EndToEnd(t)
	tg := startSleeper(t)
	w, err := New(Config{PID: tg.Pid, Settings: quick(t), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	if err := tg.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrTargetExited) {
			t.Errorf("Run returned %v, want ErrTargetExited", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return 30 s after its target was killed")
	}
}

// TestOpenExitedTarget: a target that exited before its session opened is
// ErrTargetExited, and the message names its pid once (each function
// names its own arguments; callers add only what they add). The target
// is a zombie its parent (this test) has not reaped, then a pid gone.
func TestOpenExitedTarget(t *testing.T) {
	testutil.RequirePerf(t)
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	zombie := func() bool { st, err := procfs.ReadStat(pid, pid); return err == nil && st.State == 'Z' }
	if err := testutil.Eventually(10*time.Second, zombie); err != nil {
		cmd.Wait()
		t.Fatalf("pid %d never became a zombie", pid)
	}
	s := quick(t)
	s.Capture.NoFlightRecorder, s.Capture.BaselineFreq = false, 49
	open := func(what string) {
		w, err := New(Config{PID: pid, Settings: s})
		if err != nil {
			t.Fatalf("%s: New: %v", what, err)
		}
		defer w.Close()
		err = w.Open()
		if !errors.Is(err, ErrTargetExited) {
			t.Fatalf("%s: Open: %v, want ErrTargetExited", what, err)
		}
		if n := strings.Count(err.Error(), fmt.Sprint(pid)); n != 1 {
			t.Errorf("%s: %q names pid %d %d times", what, err, pid, n)
		}
	}
	open("a zombie")
	cmd.Wait()
	open("a pid gone")
}
