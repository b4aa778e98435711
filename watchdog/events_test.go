package watchdog

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// eventLog records a watchdog's events.
type eventLog struct {
	mu  sync.Mutex
	evs []Event
}

func (l *eventLog) add(ev Event) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

func (l *eventLog) kinds(skip EventKind) []EventKind {
	l.mu.Lock()
	defer l.mu.Unlock()
	var k []EventKind
	for _, ev := range l.evs {
		if ev.Kind != skip {
			k = append(k, ev.Kind)
		}
	}
	return k
}

// any reports whether some event so far satisfies ok.
func (l *eventLog) any(ok func(Event) bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.evs, ok)
}

func (l *eventLog) first(kind EventKind) *Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.evs {
		if l.evs[i].Kind == kind {
			ev := l.evs[i]
			return &ev
		}
	}
	return nil
}

func (l *eventLog) wait(t *testing.T, kind EventKind) Event {
	t.Helper()
	if err := testutil.Eventually(10*time.Second, func() bool { return l.first(kind) != nil }); err != nil {
		t.Fatalf("no %v event; got %v", kind, l.kinds(0))
	}
	return *l.first(kind)
}

// TestEvents: a stall, its capture and its recovery are told as events,
// in that order, with what alerts, hooks and uploads need; the stall's
// event comes before its capture is written.
func TestEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "beat")
	beater := startFileBeater(t, path, 20*time.Millisecond)
	fc := newFakeCapturer(300 * time.Millisecond)
	var log eventLog
	stallAfter := time.Second
	runWatchdog(t, Config{
		PID: 0, Sources: []Source{&File{Path: path, Poll: PollInterval(stallAfter)}}, StallAfter: stallAfter,
		RecaptureAfter: time.Hour, MaxCaptures: 6, Capturer: fc, Events: log.add, ReportEvery: 100 * time.Millisecond,
	})
	var hb *Event
	if err := testutil.Eventually(5*time.Second, func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		for i := range log.evs {
			if log.evs[i].Kind == Heartbeat && log.evs[i].Beaten {
				hb = &log.evs[i]
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal("no heartbeat report after a beat")
	}
	if hb.Stalled || hb.Age > stallAfter {
		t.Errorf("heartbeat while healthy: %+v", hb)
	}
	beater.halt()
	began := log.wait(t, StallBegan)
	if began.Stall.Start.IsZero() || began.Stall.For < stallAfter || began.Stall.Source != "file "+path || began.Stall.Reason == "" {
		t.Errorf("stall event %+v", began.Stall)
	}
	if log.first(CaptureDone) != nil {
		t.Error("the stall's event came after its capture")
	}
	if err := testutil.Eventually(5*time.Second, func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		for _, e := range log.evs {
			if e.Kind == Heartbeat && e.Stalled {
				return e.Age >= stallAfter && e.Stall.Start.Equal(began.Stall.Start)
			}
		}
		return false
	}); err != nil {
		t.Error("no heartbeat report says stalled with the stall's age")
	}
	done := log.wait(t, CaptureDone)
	if done.Result == nil || done.Err != nil || done.Trigger == nil || done.Trigger.Kind != model.Stall {
		t.Fatalf("capture event %+v", done)
	}
	if !done.Stall.Start.Equal(began.Stall.Start) {
		t.Errorf("capture's stall starts at %v, the stall at %v", done.Stall.Start, began.Stall.Start)
	}
	resumed := startFileBeater(t, path, 20*time.Millisecond)
	defer resumed.halt()
	rec := log.wait(t, Recovered)
	if !rec.Stall.Start.Equal(began.Stall.Start) || rec.Stall.For < stallAfter || len(rec.Captures) != 1 || rec.Captures[0] != done.Result {
		t.Errorf("recovery event %+v", rec)
	}
	want := []EventKind{StallBegan, CaptureDone, Recovered}
	if got := log.kinds(Heartbeat); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("events %v, want %v", got, want)
	}
}

// TestEventsRecoverDuringCapture: beats resume while the stall's capture
// runs; the recovery is told at the beat, then the capture.
func TestEventsRecoverDuringCapture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "beat")
	beater := startFileBeater(t, path, 20*time.Millisecond)
	fc := newFakeCapturer(2 * time.Second)
	var log eventLog
	stallAfter := 500 * time.Millisecond
	runWatchdog(t, Config{
		Sources: []Source{&File{Path: path, Poll: PollInterval(stallAfter)}}, StallAfter: stallAfter,
		RecaptureAfter: time.Hour, MaxCaptures: 6, Capturer: fc, Events: log.add, ReportEvery: 50 * time.Millisecond,
	})
	// Reports fall on shared instants: the first may come before the
	// first beat was taken. Some report must say beaten.
	if err := testutil.Eventually(5*time.Second, func() bool { return log.any(func(e Event) bool { return e.Kind == Heartbeat && e.Beaten }) }); err != nil {
		t.Fatal("no beat seen")
	}
	beater.halt()
	fc.expectCapture(t, 5*time.Second)
	resumed := startFileBeater(t, path, 20*time.Millisecond)
	defer resumed.halt()
	rec := log.wait(t, Recovered)
	if len(rec.Captures) != 0 {
		t.Errorf("the running capture is among the recovered stall's: %+v", rec.Captures)
	}
	log.wait(t, CaptureDone)
	if got := log.kinds(Heartbeat); len(got) != 3 || got[1] != Recovered || got[2] != CaptureDone {
		t.Errorf("events %v", got)
	}
}

// TestEventsSignalWhileHealthy: a capture on demand is told with no stall.
func TestEventsSignalWhileHealthy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "beat")
	startFileBeater(t, path, 20*time.Millisecond)
	var log eventLog
	w, _, _ := runWatchdog(t, Config{Sources: []Source{&File{Path: path}}, StallAfter: 5 * time.Second, MaxCaptures: 6,
		Capturer: newFakeCapturer(10 * time.Millisecond), Events: log.add})
	w.CaptureNow()
	ev := log.wait(t, CaptureDone)
	if ev.Trigger.Kind != model.Signal || !ev.Stall.Start.IsZero() {
		t.Errorf("signal capture event %+v", ev)
	}
}
