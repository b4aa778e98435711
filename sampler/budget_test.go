package sampler

import (
	"strings"
	"testing"
)

// The plan gives up the tracker's promptness first, then off-CPU
// sampling, then threads; a subset is as large as the budget allows.
func TestPlanFDs(t *testing.T) {
	const inUse, headroom = 40, 256
	fixed := inUse + headroom + samplerFDs
	cases := []struct {
		name      string
		threads   int
		limit     uint64
		offCPU    bool
		per       int
		fold, off bool
		max       int
	}{
		{"fits", 7000, 22000, true, 3, false, true, (22000 - fixed) / 3},
		{"the audit's 7,000 threads at 20,000", 7000, 20000, true, 2, true, true, (20000 - fixed) / 2},
		{"off-CPU dropped", 7000, 10000, true, 1, true, false, 10000 - fixed},
		{"a subset", 7000, 6000, true, 1, true, false, 6000 - fixed},
		{"no off-CPU asked: folded", 7000, 10000, false, 1, true, false, 10000 - fixed},
		{"no off-CPU asked: fits", 100, 1024, false, 2, false, false, (1024 - fixed) / 2},
		{"nothing fits", 10, 100, true, 1, true, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := planFDs(c.threads, c.limit, c.limit, inUse, headroom, c.offCPU)
			if p.PerThread != c.per || p.FoldTracker != c.fold || p.OffCPU != c.off || p.MaxThreads != c.max {
				t.Errorf("plan %+v; want %d per thread, fold %v, off-CPU %v, at most %d threads", p, c.per, c.fold, c.off, c.max)
			}
			if p.DroppedOffCPU != (c.offCPU && !c.off) {
				t.Errorf("DroppedOffCPU %v", p.DroppedOffCPU)
			}
			if used := min(p.MaxThreads, p.Threads)*p.PerThread + fixed; used > int(c.limit) && p.MaxThreads > 0 {
				t.Errorf("the plan uses %d descriptors of %d", used, c.limit)
			}
			sum := p.Summary()
			if p.Degraded() != (sum != "") {
				t.Errorf("Degraded %v, summary %q", p.Degraded(), sum)
			}
			if !p.Degraded() {
				return
			}
			for _, w := range []string{"RLIMIT_NOFILE allows", "ulimit -Hn", "LimitNOFILE=", "prlimit --nofile="} {
				if !strings.Contains(sum, w) {
					t.Errorf("summary lacks %q: %s", w, sum)
				}
			}
			switch {
			case p.MaxThreads == 0:
				if !strings.Contains(sum, "sampling nothing") || !strings.Contains(sum, "thread snapshot alone") {
					t.Errorf("a plan that samples nothing does not say so: %s", sum)
				}
			case p.Subset() && !strings.Contains(sum, "busiest by CPU time"):
				t.Errorf("a subset's summary does not say which threads: %s", sum)
			}
		})
	}
}
