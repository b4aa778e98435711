package target

import (
	"slices"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/internal/unwind"
)

// TestRuleCacheSameStacks: the unwinder's per-address rule cache changes
// nothing but the cost. Real samples of the workloads BenchmarkUnwindSamples
// measures (C and Debian python3 without frame pointers, Node.js's JIT
// code, CPython 3.12's perf trampolines) are unwound with the cache off,
// then with it on, cold and warm, in both orders of the samples: every
// stack and every cut is the same.
func TestRuleCacheSameStacks(t *testing.T) {
	testutil.RequirePerf(t)
	for name, tg := range workloads(t) {
		t.Run(name, func(t *testing.T) {
			raw := rawSamples(t, tg.Pid, 16<<10, 200*time.Millisecond) // ~200 samples
			tp, err := Open(tg.Pid, Options{JIT: true})
			if err != nil {
				t.Fatal(err)
			}
			defer tp.Close()
			u := tp.Unwinder()
			type result struct {
				pcs []uint64
				cut unwind.Cut
			}
			unwindAll := func(order []int) []result {
				out := make([]result, len(raw))
				for _, i := range order {
					pcs, cut := u.UnwindSample(sampleOf(&raw[i], 16<<10), unwind.MaxFrames, nil)
					out[i] = result{pcs, cut}
				}
				return out
			}
			forward := make([]int, len(raw))
			for i := range forward {
				forward[i] = i
			}
			backward := slices.Clone(forward)
			slices.Reverse(backward)

			u.SetRuleCache(false)
			want := unwindAll(forward)
			u.SetRuleCache(true)
			frames := 0
			for pass, order := range [][]int{forward, forward, backward} {
				got := unwindAll(order)
				for i := range raw {
					if !slices.Equal(got[i].pcs, want[i].pcs) || got[i].cut != want[i].cut {
						t.Fatalf("pass %d, sample %d: cached %#x (%v), uncached %#x (%v)", pass, i, got[i].pcs, got[i].cut, want[i].pcs, want[i].cut)
					}
					frames += len(got[i].pcs)
				}
			}
			t.Logf("%d samples, %d frames each on average: the same with and without the cache", len(raw), frames/(3*len(raw)))
		})
	}
}
