package watchdog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// fakeCapturer stands in for the capture package: it records what it is
// asked and holds each capture for hold, or until cancelled.
type fakeCapturer struct {
	hold      time.Duration
	captures  chan model.Trigger
	recovered chan time.Duration
	cut       atomic.Int32 // captures cut short by cancellation
	n         atomic.Int32
}

func newFakeCapturer(hold time.Duration) *fakeCapturer {
	return &fakeCapturer{hold: hold, captures: make(chan model.Trigger, 100), recovered: make(chan time.Duration, 100)}
}

func (f *fakeCapturer) Capture(ctx context.Context, tr model.Trigger) (*model.Result, error) {
	f.captures <- tr
	res := &model.Result{Dir: fmt.Sprintf("capture-%d", f.n.Add(1)), Trigger: tr}
	select {
	case <-time.After(f.hold):
	case <-ctx.Done():
		f.cut.Add(1)
		res.Info.CutShort, res.Info.CutShortWhy = true, "cancelled"
	}
	return res, nil
}

func (f *fakeCapturer) Recovered(res *model.Result, stall time.Duration) error {
	f.recovered <- stall
	return nil
}

func (f *fakeCapturer) expectCapture(t *testing.T, within time.Duration) model.Trigger {
	t.Helper()
	select {
	case tr := <-f.captures:
		return tr
	case <-time.After(within):
		t.Fatalf("no capture within %v", within)
	}
	return model.Trigger{}
}

func (f *fakeCapturer) expectNoCapture(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case tr := <-f.captures:
		t.Fatalf("unexpected capture: %+v", tr)
	case <-time.After(d):
	}
}

// runWatchdog runs w until the test ends; the returned channel yields Run's
// result.
func runWatchdog(t *testing.T, cfg Config) (*Watchdog, context.CancelFunc, <-chan error) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(&logRecorder{})
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() { done <- w.Run(ctx); close(finished) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(5 * time.Second):
			t.Error("watchdog did not stop")
		}
	})
	return w, cancel, done
}

// fileBeater touches a heartbeat file every interval until stopped, and
// remembers when it last did (CLOCK_MONOTONIC).
type fileBeater struct {
	path     string
	stop     chan struct{}
	done     chan struct{}
	lastBeat atomic.Int64
}

func startFileBeater(t *testing.T, path string, every time.Duration) *fileBeater {
	b := &fileBeater{path: path, stop: make(chan struct{}), done: make(chan struct{})}
	b.run(every)
	t.Cleanup(b.halt)
	return b
}

func (b *fileBeater) run(every time.Duration) {
	go func() {
		defer close(b.done)
		for i := 0; ; i++ {
			if err := os.WriteFile(b.path+".tmp", []byte(fmt.Sprint(i)), 0o644); err == nil {
				// Stamped before the rename that is the beat, so
				// that latencies measured from it are not flattered.
				b.lastBeat.Store(int64(monotime.Now()))
				os.Rename(b.path+".tmp", b.path)
			}
			select {
			case <-b.stop:
				return
			case <-time.After(every):
			}
		}
	}()
}

func (b *fileBeater) halt() {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
}

func TestWatchdogFileStallCaptureRecover(t *testing.T) {
	path := filepath.Join(t.TempDir(), "beat")
	beater := startFileBeater(t, path, 20*time.Millisecond)
	fc := newFakeCapturer(100 * time.Millisecond)
	rec := &logRecorder{}
	// 50 beats per stall-after: a loaded machine may delay the beater,
	// not by a second.
	stallAfter := time.Second
	runWatchdog(t, Config{
		Sources: []Source{&File{Path: path, Poll: PollInterval(stallAfter)}}, StallAfter: stallAfter,
		RecaptureAfter: time.Hour, MaxCaptures: 6, Capturer: fc, Logger: slog.New(rec),
	})
	fc.expectNoCapture(t, 3*stallAfter/2)

	beater.halt()
	stopped := time.Now()
	tr := fc.expectCapture(t, stallAfter+time.Second)
	if tr.Kind != model.Stall || tr.Seq != 1 || tr.Source != "file "+path {
		t.Errorf("trigger %+v", tr)
	}
	if tr.StallFor < stallAfter || tr.StallFor > stallAfter+time.Second {
		t.Errorf("trigger says silent for %v, want about %v", tr.StallFor, stallAfter)
	}
	if late := time.Duration(tr.Mono) - time.Duration(beater.lastBeat.Load()) - stallAfter; late < 0 || late > time.Second {
		t.Errorf("trigger %v after last beat + stall-after", late)
	}
	if err := testutil.Eventually(5*time.Second, func() bool { return slices.Contains(rec.states(), "cooldown") }); err != nil {
		t.Fatalf("no cooldown after the capture; log:\n%s", rec.dump())
	}
	resumed := startFileBeater(t, path, 20*time.Millisecond)
	defer resumed.halt()
	select {
	case stall := <-fc.recovered:
		if min := time.Since(stopped) - time.Second; stall < stallAfter || stall < min {
			t.Errorf("recovered stall %v is shorter than the silence", stall)
		}
	case <-time.After(3 * time.Second):
		t.Fatalf("stateRecovered not called when beats resumed; log:\n%s", rec.dump())
	}
	want := []string{"healthy", "stalled", "capturing", "cooldown", "recovered", "healthy"}
	if err := testutil.Eventually(2*time.Second, func() bool { return len(rec.states()) >= len(want) }); err != nil || strings.Join(rec.states(), " ") != strings.Join(want, " ") {
		t.Errorf("state lines %v, want %v", rec.states(), want)
	}
}

func TestWatchdogSignalAndShutdown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "beat")
	startFileBeater(t, path, 20*time.Millisecond)
	fc := newFakeCapturer(time.Hour) // only cancellation ends it
	w, cancel, done := runWatchdog(t, Config{
		Sources: []Source{&File{Path: path}}, StallAfter: 5 * time.Second, MaxCaptures: 6, Capturer: fc,
	})
	w.CaptureNow()
	tr := fc.expectCapture(t, 2*time.Second)
	if tr.Kind != model.Signal {
		t.Errorf("trigger kind %q, want signal", tr.Kind)
	}
	w.CaptureNow() // merged into a follow-up capture; never blocks
	w.CaptureNow()
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return within 2s of cancel during a capture")
	}
	if fc.cut.Load() != 1 {
		t.Errorf("the capture in progress was not cut short (cut %d)", fc.cut.Load())
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("shutdown took %v", d)
	}
}

func TestWatchdogTargetExit(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	target := testutil.StartCmd(t, cmd)
	fc := newFakeCapturer(time.Hour)
	rec := &logRecorder{}
	_, _, done := runWatchdog(t, Config{
		PID:     target.Pid,
		Sources: []Source{&Progress{PID: target.Pid, Interval: 20 * time.Millisecond}}, StallAfter: time.Second,
		MaxCaptures: 6, Capturer: fc, Logger: slog.New(rec),
	})
	// It spins: wait until the watchdog has seen that.
	if err := testutil.Eventually(10*time.Second, func() bool { return slices.Contains(rec.states(), "healthy") }); err != nil {
		t.Fatalf("a spinning target never made the watchdog healthy; log:\n%s", rec.dump())
	}
	cmd.Process.Kill()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTargetExited) {
			t.Errorf("Run = %v, want ErrTargetExited", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("watchdog did not notice the target's exit")
	}
	fc.expectNoCapture(t, 50*time.Millisecond)
	if r, ok := rec.find(stateMessages[stateExited]); !ok || attr(r, "was").String() != "healthy" {
		t.Errorf("exit not reported as an exit of a healthy target: %v", r)
	}
}

func TestWatchdogAlreadyExitedTarget(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	_, _, done := runWatchdog(t, Config{PID: cmd.Process.Pid, Sources: []Source{&File{Path: "/nonexistent/beat"}}, Capturer: newFakeCapturer(0)})
	select {
	case err := <-done:
		if !errors.Is(err, ErrTargetExited) {
			t.Errorf("Run = %v, want ErrTargetExited", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("watching a pid that is gone did not end")
	}
}

func TestWatchdogSourceFailure(t *testing.T) {
	_, _, done := runWatchdog(t, Config{Sources: []Source{&HTTP{URL: "::bad"}}, Capturer: newFakeCapturer(0)})
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "http ::bad") {
			t.Errorf("Run = %v, want the source's error naming it", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a failed source did not stop the watchdog")
	}
}

func TestNewRejects(t *testing.T) {
	fc := newFakeCapturer(0)
	for _, cfg := range []Config{
		{Capturer: fc},
		{Sources: []Source{&File{Path: "x"}}},
		{Sources: []Source{&File{Path: "x"}}, Capturer: fc, MaxCaptures: -1},
		{Sources: []Source{&File{Path: "x"}}, Capturer: fc, StallAfter: -time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// fakeClock is a clock the test moves by hand; timers fire when it passes
// them.
type fakeClock struct {
	mu     sync.Mutex
	now    instant
	timers []*fakeTimer
}

type fakeTimer struct {
	at      instant
	f       func()
	stopped bool
}

func (c *fakeClock) Now() instant {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) func() bool {
	if d <= 0 {
		go f()
		return func() bool { return false }
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// advance moves the clock: mono (and the wall clock) by d, the boot clock
// by d plus suspended. Due timers fire.
func (c *fakeClock) advance(d, suspended time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.now.Boot += suspended
	var due []func()
	for _, t := range c.timers {
		if !t.stopped && !c.now.Before(t.at) {
			t.stopped = true
			due = append(due, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range due {
		f()
	}
}

// manualSource beats when the test says so.
type manualSource struct{ beats chan struct{} }

func (m *manualSource) String() string { return "manual" }
func (m *manualSource) Run(ctx context.Context, beat func()) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.beats:
			beat()
		}
	}
}

func TestWatchdogFakeClockSuspendRearms(t *testing.T) {
	clk := &fakeClock{now: t0(0)}
	src := &manualSource{beats: make(chan struct{})}
	fc := newFakeCapturer(time.Hour)
	rec := &logRecorder{}
	runWatchdog(t, Config{Sources: []Source{src}, StallAfter: 10 * time.Second, MaxCaptures: 6, Capturer: fc, Logger: slog.New(rec), clock: clk})
	src.beats <- struct{}{}
	if err := testutil.Eventually(2*time.Second, func() bool { return len(rec.states()) > 0 }); err != nil {
		t.Fatal("first beat never reached the detector")
	}
	// The host sleeps for an hour right before the stall deadline: the
	// monotonic clock reaches the deadline, the boot clock says why.
	clk.advance(10*time.Second, time.Hour)
	if err := testutil.Eventually(2*time.Second, func() bool { _, ok := rec.find("woke up late"); return ok }); err != nil {
		t.Fatalf("suspend not noticed; log:\n%s", rec.dump())
	}
	fc.expectNoCapture(t, 100*time.Millisecond)
	// Re-armed: a full stall-after later, the silence is the target's.
	clk.advance(9*time.Second, 0)
	fc.expectNoCapture(t, 100*time.Millisecond)
	clk.advance(time.Second, 0)
	tr := fc.expectCapture(t, 2*time.Second)
	if tr.StallFor != 10*time.Second {
		t.Errorf("stall for %v, want 10s counted from the re-arm", tr.StallFor)
	}
}

func TestWatchdogTargetExitDuringCapture(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "30")
	target := testutil.StartCmd(t, cmd)
	fc := newFakeCapturer(time.Hour)
	w, _, done := runWatchdog(t, Config{PID: target.Pid, Sources: []Source{&File{Path: filepath.Join(t.TempDir(), "beat")}}, MaxCaptures: 6, Capturer: fc})
	w.CaptureNow()
	fc.expectCapture(t, 2*time.Second)
	cmd.Process.Kill()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTargetExited) {
			t.Errorf("Run = %v, want ErrTargetExited", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("target exit during a capture not noticed")
	}
	if fc.cut.Load() != 1 {
		t.Error("the capture of a target that exited was not cut short")
	}
}

// disturbingCapturer stands for a real capture of a frozen process: its
// snapshot stops and resumes the target's threads, which moves their
// scheduler counters. Here a SIGCONT/SIGSTOP pair does the same.
type disturbingCapturer struct {
	*fakeCapturer
	pid int
}

func (d *disturbingCapturer) Capture(ctx context.Context, tr model.Trigger) (*model.Result, error) {
	if err := stopCont(d.pid, syscall.SIGCONT); err != nil {
		return nil, err
	}
	if err := stopCont(d.pid, syscall.SIGSTOP); err != nil {
		return nil, err
	}
	return d.fakeCapturer.Capture(ctx, tr)
}

// stopCont sends pid SIGSTOP or SIGCONT and waits until /proc shows it
// stopped or no longer stopped: each is a context switch the progress
// heartbeat sees.
func stopCont(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	return testutil.Eventually(10*time.Second, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		i := strings.LastIndexByte(string(b), ')')
		if err != nil || i < 0 || i+2 >= len(b) {
			return false
		}
		return (b[i+2] == 'T') == (sig == syscall.SIGSTOP)
	})
}

// TestWatchdogProgressIgnoresItsOwnCapture: a process frozen by SIGSTOP
// stalls its progress heartbeat; the capture's own disturbance of its
// threads is not taken for the process recovering.
func TestWatchdogProgressIgnoresItsOwnCapture(t *testing.T) {
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	fc := &disturbingCapturer{fakeCapturer: newFakeCapturer(300 * time.Millisecond), pid: pid}
	src := &Progress{PID: pid, Interval: 20 * time.Millisecond}
	rec := &logRecorder{}
	_, cancel, _ := runWatchdog(t, Config{PID: pid, Sources: []Source{src}, StallAfter: 400 * time.Millisecond,
		RecaptureAfter: time.Hour, MaxCaptures: 10, Capturer: fc, Logger: slog.New(rec)})
	defer cancel()
	// Beats: stop and continue the process (each moves it) until the
	// watchdog is healthy.
	healthy := func() bool { return slices.Contains(rec.states(), "healthy") }
	for deadline := time.Now().Add(10 * time.Second); !healthy(); {
		if time.Now().After(deadline) {
			t.Fatalf("stopping and continuing the process never made the watchdog healthy; log:\n%s", rec.dump())
		}
		if err := stopCont(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		if err := stopCont(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	if err := stopCont(pid, syscall.SIGSTOP); err != nil { // frozen from here on
		t.Fatal(err)
	}
	fc.expectCapture(t, 5*time.Second)
	select {
	case stall := <-fc.recovered:
		t.Fatalf("the frozen process was reported recovered after %v: the capture's own effect was taken for a beat", stall)
	case <-time.After(1500 * time.Millisecond):
	}
}
