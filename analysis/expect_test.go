package analysis_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stallwatch/stallwatch/internal/textfmt"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// What the scenarios check, from a capture's content alone.

func findingOf(c *report.Capture, k model.FindingKind) (model.Finding, bool) {
	for _, f := range c.Info.Findings {
		if f.Kind == k {
			return f, true
		}
	}
	return model.Finding{}, false
}

// finding is c's finding of kind k; the test fails without one.
func finding(t *testing.T, c *report.Capture, k model.FindingKind) model.Finding {
	t.Helper()
	f, ok := findingOf(c, k)
	if !ok {
		t.Fatalf("no %s finding; findings:\n%s", k, findingsText(c))
	}
	return f
}

// first is c's first finding, which must be of kind k.
func first(t *testing.T, c *report.Capture, k model.FindingKind) model.Finding {
	t.Helper()
	if len(c.Info.Findings) == 0 || c.Info.Findings[0].Kind != k {
		t.Fatalf("the first finding is not %s; findings:\n%s", k, findingsText(c))
	}
	return c.Info.Findings[0]
}

// only is c's finding of kind k, with none of the others no other
// scenario's target produces.
func only(t *testing.T, c *report.Capture, k model.FindingKind) model.Finding {
	t.Helper()
	f := finding(t, c, k)
	for _, o := range unrelated {
		if o != k {
			none(t, c, o)
		}
	}
	return f
}

func none(t *testing.T, c *report.Capture, k model.FindingKind) {
	t.Helper()
	if f, ok := findingOf(c, k); ok {
		t.Errorf("a %s finding where there should be none: %s\nall findings:\n%s", k, f.Summary, findingsText(c))
	}
}

func findingsText(c *report.Capture) string {
	var sb strings.Builder
	for _, f := range c.Info.Findings {
		sb.WriteString("  [" + string(f.Severity) + " " + string(f.Kind) + "] " + f.Summary + "\n      " + f.Detail + "\n")
	}
	return sb.String()
}

// threadNamed is the snapshot's thread of that name.
func threadNamed(t *testing.T, c *report.Capture, name string) *model.Thread {
	t.Helper()
	if c.Threads != nil {
		for i := range c.Threads.Threads {
			if c.Threads.Threads[i].Name == name {
				return &c.Threads.Threads[i]
			}
		}
	}
	t.Fatalf("the snapshot has no thread %q", name)
	return nil
}

func tidNamed(t *testing.T, c *report.Capture, name string) int {
	t.Helper()
	return threadNamed(t, c, name).TID
}

// stackText is a thread's user stack by function name, innermost first.
func stackText(th *model.Thread) string {
	var names []string
	for _, l := range th.User {
		for _, ln := range l.Lines {
			names = append(names, ln.Function)
		}
	}
	return strings.Join(names, " ← ")
}

func topFrame(th *model.Thread) string { return textfmt.TopFrame(th) }

// expectDemo: the demo's deadlock comes first, the reconciler that spins
// while the others wait is named for it, and it is not "starved"
// although it waited now and then for a CPU.
func expectDemo(t *testing.T, c *report.Capture) {
	dl := first(t, c, model.FindingDeadlock)
	for _, k := range []model.FindingKind{model.FindingStopped, model.FindingRuntimePause, model.FindingEventLoopBlocked,
		model.FindingGIL, model.FindingLockConvoy, model.FindingUninterruptible, model.FindingMissingJITSymbols} {
		none(t, c, k)
	}
	c2s, s2c, rec := tidNamed(t, c, "transfer-c2s"), tidNamed(t, c, "transfer-s2c"), tidNamed(t, c, "reconciler")
	if !slices.Contains(dl.TIDs, c2s) || !slices.Contains(dl.TIDs, s2c) {
		t.Errorf("the deadlock names %v, want the transfer threads %d and %d", dl.TIDs, c2s, s2c)
	}
	// What the reconciler got depends on the host: on a quiet one it
	// spins nearly the whole window; on one loaded by other processes it
	// waits for a CPU. The findings must follow what it got.
	cpu, runq, window := threadShares(c, rec)
	t.Logf("reconciler: on a CPU %.0f%%, runnable but waiting %.0f%% of the %v window", 100*cpu, 100*runq, window)
	starved, isStarved := findingOf(c, model.FindingCPUStarvation)
	isStarved = isStarved && slices.Contains(starved.TIDs, rec)
	switch {
	case cpu >= 0.8:
		spin := finding(t, c, model.FindingSpinning)
		if len(spin.TIDs) == 0 || spin.TIDs[0] != rec || !strings.Contains(strings.Join(spin.Functions, " "), "main.reconcile") {
			t.Errorf("the spinning finding names %v %v, want the reconciler %d in main.reconcile", spin.TIDs, spin.Functions, rec)
		}
		none(t, c, model.FindingHotThread)
		if isStarved {
			t.Errorf("the reconciler, on a CPU %.0f%% of the window, is called starved: %s", 100*cpu, starved.Summary)
		}
	case runq >= 0.2 && runq >= cpu:
		if !isStarved {
			t.Errorf("the reconciler waited %.0f%% of the window for a CPU and ran %.0f%%: it is starved, and no finding says so", 100*runq, 100*cpu)
		}
	default:
		if isStarved {
			t.Errorf("the reconciler waited only %.0f%% of the window for a CPU (ran %.0f%%), yet: %s", 100*runq, 100*cpu, starved.Summary)
		}
	}
}

// threadShares is a thread's on-CPU and runnable-waiting time during the
// stall, as shares of the capture's window after the trigger.
func threadShares(c *report.Capture, tid int) (cpu, runq float64, window time.Duration) {
	window = c.Info.End.Sub(c.Info.TriggerAt)
	p := c.Profile
	ci, oi := -1, -1
	for i, st := range p.SampleType {
		switch st.Type {
		case model.TypeCPUTime:
			ci = i
		case model.TypeOffCPUTime:
			oi = i
		}
	}
	var on, wait int64
	label := func(s *profile.Sample, key string) string {
		if v := s.Label[key]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	for _, s := range p.Sample {
		if label(s, model.LabelThreadID) != strconv.Itoa(tid) || label(s, model.LabelPhase) != model.PhaseDuring {
			continue
		}
		on += s.Value[ci]
		if label(s, model.LabelOffCPU) == "preempted" {
			wait += s.Value[oi]
		}
	}
	return float64(on) / float64(window), float64(wait) / float64(window), window
}
