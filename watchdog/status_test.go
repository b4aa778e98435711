package watchdog

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestStatus follows a target through waiting, healthy, a stall and its
// capture, on a fake clock: the state, the heartbeat's age and the stall's
// length are what Status says at each step.
func TestStatus(t *testing.T) {
	clk := &fakeClock{now: t0(0)}
	src := &manualSource{beats: make(chan struct{})}
	fc := newFakeCapturer(time.Hour)
	rec := &logRecorder{}
	w, _, _ := runWatchdog(t, Config{Sources: []Source{src}, StallAfter: 10 * time.Second, MaxCaptures: 6, Capturer: fc, Logger: slog.New(rec), clock: clk})
	if st := w.Status(); st.State != "waiting" || st.Beaten {
		t.Errorf("before any beat: %+v", st)
	}
	src.beats <- struct{}{}
	if err := testutil.Eventually(2*time.Second, func() bool { return w.Status().State == "healthy" }); err != nil {
		t.Fatalf("never healthy: %+v", w.Status())
	}
	clk.advance(4*time.Second, 0)
	if st := w.Status(); !st.Beaten || st.Age != 4*time.Second || st.StallFor != 0 {
		t.Errorf("4s after the beat: %+v", st)
	}
	clk.advance(6*time.Second, 0)
	fc.expectCapture(t, 2*time.Second)
	if err := testutil.Eventually(2*time.Second, func() bool { return w.Status().State == "capturing" }); err != nil {
		t.Fatalf("never capturing: %+v", w.Status())
	}
	clk.advance(time.Second, 0)
	if st := w.Status(); st.Age != 11*time.Second || st.StallFor != 11*time.Second {
		t.Errorf("1s into the stall: %+v", st)
	}
}
