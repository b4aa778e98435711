package daemon

import (
	"log/slog"
	"testing"
	"time"
)

// The budget profiles less in its stated order — off-CPU samples, then
// the rate halved down to 19 Hz, then the targets with the most threads —
// one step a window while over it, never while a capture ran, and back
// one step after four windows under half of it; descriptors alone drop
// targets (nothing else frees them).
func TestProfileBudgetOrder(t *testing.T) {
	var cpu time.Duration
	fds := 10
	b := &profileBudget{log: slog.New(slog.DiscardHandler), budget: Budget{CPU: 0.05, FDs: 100},
		cpu: func() time.Duration { return cpu }, fds: func() int { return fds }}
	targets := []profiled{{pid: 1, threads: 4, freq: 97, offCPU: true}, {pid: 2, threads: 40, freq: 97}, {pid: 3, threads: 8, freq: 49}}
	now := time.Unix(1e6, 0)
	window := func(share float64, captured bool) bool {
		now = now.Add(budgetWindow)
		cpu += time.Duration(share * float64(budgetWindow))
		return b.check(now, targets, captured)
	}
	window(0, false) // the first window only starts the clock

	want := []degradation{
		{noOffCPU: true},
		{noOffCPU: true, halvings: 1}, // 48 and 24 Hz
		{noOffCPU: true, halvings: 2}, // 24 and 19
		{noOffCPU: true, halvings: 3}, // 19 and 19
		{noOffCPU: true, halvings: 3, dropped: 1},
		{noOffCPU: true, halvings: 3, dropped: 2},
		{noOffCPU: true, halvings: 3, dropped: 3},
	}
	for i, w := range want {
		if window(0.2, true) {
			t.Fatalf("step %d: a window with a capture was judged", i)
		}
		if !window(0.2, false) || b.step != w {
			t.Fatalf("step %d: %+v, want %+v", i, b.step, w)
		}
	}
	if rateAt(97, 3) != MinProfileFreq || rateAt(49, 1) != 24 || rateAt(10, 3) != 10 {
		t.Errorf("rates: 97 Hz halved 3 times %d, 49 Hz once %d, 10 Hz %d", rateAt(97, 3), rateAt(49, 1), rateAt(10, 3))
	}
	if b.drops[0] != 2 || b.drops[1] != 3 || b.drops[2] != 1 {
		t.Errorf("dropped in the order %v, want the most threads first: 2, 3, 1", b.drops)
	}
	if window(0.2, false) {
		t.Error("a step past the last")
	}
	// Well under: back one step each four windows, the last dropped
	// target first.
	for range 3 {
		if window(0.01, false) {
			t.Fatal("restored before four windows under half the budget")
		}
	}
	if !window(0.01, false) || b.step.dropped != 2 || b.dropped(1) || !b.dropped(3) {
		t.Errorf("after four windows under: %+v, drops %v", b.step, b.drops)
	}
	// Between half and the whole budget: it stays.
	for range 8 {
		if window(0.04, false) {
			t.Fatalf("a window at 80%% of the budget changed the step to %+v", b.step)
		}
	}

	// Descriptors alone: targets go, the rate stays.
	b2 := &profileBudget{log: b.log, budget: Budget{CPU: 0.05, FDs: 100}, cpu: func() time.Duration { return 0 }, fds: func() int { return 500 }}
	b2.check(now, targets, false)
	if !b2.check(now.Add(budgetWindow), targets, false) || b2.step != (degradation{dropped: 1}) || b2.drops[0] != 2 {
		t.Errorf("over the descriptor budget: %+v, drops %v; want the 40-thread target dropped, the rate kept", b2.step, b2.drops)
	}
}

func TestDegradationMark(t *testing.T) {
	for _, c := range []struct {
		s    degradation
		freq int
		want string
	}{
		{degradation{}, 97, ""},
		{degradation{noOffCPU: true}, 97, "no_offcpu"},
		{degradation{halvings: 1}, 97, "rate_48hz"},
		{degradation{noOffCPU: true, halvings: 2}, 49, "no_offcpu+rate_19hz"},
		{degradation{halvings: 2}, 19, ""},
	} {
		if got, note := c.s.mark(c.freq, Budget{CPU: 0.05, FDs: 100}); got != c.want || (got != "") != (note != "") {
			t.Errorf("%+v at %d Hz: %q (%q), want %q", c.s, c.freq, got, note, c.want)
		}
	}
}
