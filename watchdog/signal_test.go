package watchdog

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// TestDetectorMergesRequests: requests during a capture make one capture
// after it, logged once with their count; requests that come together make
// one capture.
func TestDetectorMergesRequests(t *testing.T) {
	d, rec := newTestDetector(t, defaultPolicy)
	d.Beat(0, t0(0))
	act := d.Signal(t0(1*s), 3)
	if act.capture == nil || !strings.Contains(act.capture.Reason, "(3 requests, merged into this capture)") {
		t.Fatalf("three requests at once: %+v", act.capture)
	}
	for i := range 29 {
		if a := d.Signal(t0(2*s+time.Duration(i)*time.Millisecond), 1); a.capture != nil {
			t.Fatalf("request %d started a capture during one", i)
		}
	}
	a := d.CaptureDone(t0(3*s), &model.Result{}, nil)
	if a.capture == nil || a.capture.Kind != model.Signal || !strings.Contains(a.capture.Reason, "29 requests") {
		t.Fatalf("after the capture: %+v, want one capture for the 29 requests", a.capture)
	}
	if a := d.CaptureDone(t0(4*s), &model.Result{}, nil); a.capture != nil {
		t.Fatalf("a third capture: %+v", a.capture)
	}
	r, ok := rec.find("capture requests arrived during the capture")
	if !ok || attr(r, "requests").Int64() != 29 {
		t.Errorf("the merged requests were not logged with their count; log:\n%s", rec.dump())
	}
	if n := strings.Count(rec.dump(), "capture requests arrived"); n != 1 {
		t.Errorf("%d lines about merged requests, want 1", n)
	}
}

// TestWatchdogSignalBurst: 30 requests as fast as they come make at most
// two captures (one, and one for those that came during it).
func TestWatchdogSignalBurst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "beat")
	startFileBeater(t, path, 20*time.Millisecond)
	fc := newFakeCapturer(300 * time.Millisecond)
	rec := &logRecorder{}
	w, _, _ := runWatchdog(t, Config{Sources: []Source{&File{Path: path}}, StallAfter: 5 * time.Second, MaxCaptures: 6, Capturer: fc, Logger: slog.New(rec)})
	for range 30 {
		w.CaptureNow()
	}
	fc.expectCapture(t, 5*time.Second)
	// The rest either joined the first capture or make one more.
	select {
	case <-fc.captures:
	case <-time.After(2 * time.Second):
	}
	fc.expectNoCapture(t, time.Second)
	if n := strings.Count(rec.dump(), "capture started"); n > 2 {
		t.Errorf("%d capture lines for one burst; log:\n%s", n, rec.dump())
	}
}

// TestWatchdogFrozenBeforeWatching: a process stopped before watching
// began stalls --stall-after after watching began, with the progress
// heartbeat, which counts from the start.
func TestWatchdogFrozenBeforeWatching(t *testing.T) {
	target := testutil.Start(t, "/bin/sh", "-c", "echo ready; while :; do :; done")
	target.WaitLine(t, "ready", 10*time.Second)
	if err := syscall.Kill(target.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Eventually(5*time.Second, func() bool { return procState(target.Pid) == 'T' }); err != nil {
		t.Fatal("the target did not stop")
	}
	fc := newFakeCapturer(time.Hour)
	rec := &logRecorder{}
	start := time.Now()
	runWatchdog(t, Config{PID: target.Pid, Sources: []Source{&Progress{PID: target.Pid, Interval: 20 * time.Millisecond}},
		StallAfter: 300 * time.Millisecond, MaxCaptures: 6, Capturer: fc, Logger: slog.New(rec)})
	tr := fc.expectCapture(t, 10*time.Second)
	if tr.Kind != model.Stall {
		t.Errorf("capture %+v, want a stall", tr)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("stalled %v after watching began, before --stall-after", d)
	}
	if strings.Contains(rec.dump(), "no heartbeat seen yet") {
		t.Errorf("the progress heartbeat waited for a first beat; log:\n%s", rec.dump())
	}
}

// procState is the state letter of process pid (0 when it is gone).
func procState(pid int) byte {
	st, err := procfs.ReadStat(pid, pid)
	if err != nil {
		return 0
	}
	return st.State
}

// TestWatchdogAbandon: a stopping watchdog waits for the capture in
// progress to be written, unless asked to leave it (a second SIGTERM).
func TestWatchdogAbandon(t *testing.T) {
	path := filepath.Join(t.TempDir(), "beat")
	startFileBeater(t, path, 20*time.Millisecond)
	fc := newStubbornCapturer()
	rec := &logRecorder{}
	w, cancel, done := runWatchdog(t, Config{Sources: []Source{&File{Path: path}}, StallAfter: 5 * time.Second, MaxCaptures: 6, Capturer: fc, Logger: slog.New(rec),
		AbandonHint: "signal again to leave it"})
	w.CaptureNow()
	<-fc.started
	cancel()
	select {
	case <-done:
		t.Fatal("Run returned while the capture was still being written")
	case <-fc.cancelled:
	}
	w.Abandon()
	select {
	case <-done:
	case <-time.After(shutdownGrace / 2): // without Abandon, the grace would end it

		t.Fatal("Run still waited for the capture after Abandon")
	}
	if _, ok := rec.find("leaving the capture in progress unfinished"); !ok {
		t.Errorf("leaving the capture was not logged:\n%s", rec.dump())
	}
	if _, ok := rec.find("stopping: the capture in progress is finished and written first; signal again to leave it"); !ok {
		t.Errorf("stopping during a capture did not say it is finished first, and how to leave it:\n%s", rec.dump())
	}
	close(fc.release)
}

// TestWatchdogStopWithoutCapture: a watchdog stopped while no capture runs
// says nothing of one (every SIGINT said "a capture in progress is
// finished first").
func TestWatchdogStopWithoutCapture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "beat")
	startFileBeater(t, path, 20*time.Millisecond)
	rec := &logRecorder{}
	w, cancel, done := runWatchdog(t, Config{Sources: []Source{&File{Path: path}}, StallAfter: 5 * time.Second, MaxCaptures: 6,
		Capturer: newFakeCapturer(time.Hour), Logger: slog.New(rec), AbandonHint: "signal again to leave it"})
	if err := testutil.Eventually(5*time.Second, func() bool { return w.Status().State == "healthy" }); err != nil {
		t.Fatalf("never healthy: %+v", w.Status())
	}
	cancel()
	<-done
	if _, ok := rec.find("watchdog stopping"); !ok {
		t.Errorf("stopping was not logged:\n%s", rec.dump())
	}
	if strings.Contains(rec.dump(), "capture in progress") {
		t.Errorf("a stop without a capture speaks of one:\n%s", rec.dump())
	}
}

// stubbornCapturer takes as long as the test says to finish a capture,
// cancelled or not (as writing one does).
type stubbornCapturer struct {
	started, cancelled, release chan struct{}
}

func newStubbornCapturer() *stubbornCapturer {
	return &stubbornCapturer{started: make(chan struct{}), cancelled: make(chan struct{}), release: make(chan struct{})}
}

func (s *stubbornCapturer) Capture(ctx context.Context, tr model.Trigger) (*model.Result, error) {
	close(s.started)
	<-ctx.Done()
	close(s.cancelled)
	<-s.release
	return &model.Result{Trigger: tr}, nil
}

func (s *stubbornCapturer) Recovered(*model.Result, time.Duration) error { return nil }
