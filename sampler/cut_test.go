package sampler

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// Recordings cut one after another are contiguous and hold every sample
// once: against a recording that ran over all of them, each on-CPU sample
// is in exactly one cut, the one whose [start, end) holds its time, and
// each thread's off-CPU time adds up to the same — intervals across a
// cut split there, those still open at a cut counted up to it — with
// nothing outside its cut's bounds. Spinners and nappers (a thousand
// switches a second) make both kinds of sample cross every cut.
func TestCutContiguous(t *testing.T) {
	testutil.RequirePerf(t)
	tg := testutil.Start(t, target(t, "offcpu/offcpu.c"), "-n", "2", "-s", "2")
	tg.WaitLine(t, "ready", 30*time.Second)
	s := mustStart(t, Config{PID: tg.Pid, Freq: 499, OffCPU: true, Kernel: true})
	whole := s.StartRecording()
	cur := s.StartRecording()
	var cuts []*Recording
	var samples [][]Sample
	// Cut until the cuts hold 100 on-CPU samples (0.1 s of two spinners
	// at 499 Hz on an idle host; a loaded one gives the spinners less of
	// a CPU, so it takes more cuts), at least six.
	held := 0
	for i := 0; i < 6 || held < 100 && i < 300; i++ {
		time.Sleep(150 * time.Millisecond)
		// Cut a little in the past: samples taken since then move to
		// the next recording.
		next := cur.Cut(cur.Start() + uint64(100*time.Millisecond))
		if next.Start() != cur.End() {
			t.Fatalf("cut %d ends at %d, the next begins at %d", i, cur.End(), next.Start())
		}
		cuts = append(cuts, cur)
		ss := cur.Stop()
		samples = append(samples, ss)
		for _, smp := range ss {
			if smp.Kind == OnCPU {
				held++
			}
		}
		cur = next
	}
	all := whole.Stop()
	from, to := cuts[0].Start(), cuts[len(cuts)-1].End()

	onCPU := map[string]int{} // tid@time: how many cuts hold it
	offCut := map[int32]uint64{}
	for i, ss := range samples {
		c := cuts[i]
		if got := c.End() - c.Start(); got != uint64(100*time.Millisecond) {
			t.Errorf("cut %d is %v long, want 100ms", i, time.Duration(got))
		}
		for _, smp := range ss {
			if smp.Time < c.Start() || smp.End() > c.End() || smp.Kind == OnCPU && smp.Time == c.End() {
				t.Errorf("cut %d [%d, %d] holds a %v sample [%d, %d]", i, c.Start(), c.End(), smp.Kind, smp.Time, smp.End())
			}
			if smp.Kind == OnCPU {
				onCPU[fmt.Sprintf("%d@%d", smp.TID, smp.Time)]++
			} else {
				offCut[smp.TID] += smp.Weight
			}
		}
		if i > 0 && !sort.SliceIsSorted(ss, func(a, b int) bool { return ss[a].Time < ss[b].Time }) {
			t.Errorf("cut %d: samples not sorted by time", i)
		}
	}
	offWhole := map[int32]uint64{}
	want := 0
	for _, smp := range all {
		if smp.Kind == OnCPU {
			if smp.Time < from || smp.Time >= to {
				continue
			}
			want++
			if n := onCPU[fmt.Sprintf("%d@%d", smp.TID, smp.Time)]; n != 1 {
				t.Errorf("on-CPU sample of %d at %d is in %d cuts, want 1", smp.TID, smp.Time, n)
			}
			continue
		}
		if c, ok := clip(smp, from, to); ok {
			offWhole[c.TID] += c.Weight
		}
	}
	if len(onCPU) != want {
		t.Errorf("the cuts hold %d on-CPU samples, the whole recording %d in their span", len(onCPU), want)
	}
	if want < 100 {
		t.Errorf("%d on-CPU samples in %d cuts of 0.1 s of two spinners at 499 Hz; want at least 100", want, len(cuts))
	}
	if len(offWhole) < 4 {
		t.Errorf("off-CPU time of %d threads, want the sleeper, the piper and two nappers", len(offWhole))
	}
	for tid, w := range offWhole {
		if offCut[tid] != w {
			t.Errorf("thread %d: %v off the CPU in the cuts, %v in the whole recording over their span", tid, time.Duration(offCut[tid]), time.Duration(w))
		}
	}
	// The sleeper and the piper were blocked throughout: off-CPU for all
	// of every cut.
	full := 0
	for _, w := range offCut {
		if w == to-from {
			full++
		}
	}
	if full < 2 {
		t.Errorf("%d threads off the CPU for the whole %v of the cuts, want the sleeper and the piper", full, time.Duration(to-from))
	}
}

// Cutting a recording of a target that exited ends it at the exit, and
// the next one is empty and stopped there; a recording stopped before it
// is cut gives a next one that begins where it ended.
func TestCutAfterExit(t *testing.T) {
	testutil.RequirePerf(t)
	tg := startTarget(t, "exiter", "-after", "300ms", "-threads", "1")
	s := mustStart(t, Config{PID: tg.Pid, Freq: 997, OffCPU: true})
	rec := s.StartRecording()
	select {
	case <-s.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the target did not exit")
	}
	exit := s.Stats().ExitTime
	next := rec.Cut(exit + uint64(time.Second))
	if rec.End() != exit || next.Start() != exit || next.End() != exit {
		t.Errorf("cut after the exit at %d: [%d, %d], next [%d, %d]; want both to end at the exit", exit, rec.Start(), rec.End(), next.Start(), next.End())
	}
	if ss := next.Stop(); len(ss) != 0 {
		t.Errorf("the recording after the exit holds %d samples", len(ss))
	}
	for _, smp := range rec.Stop() {
		if smp.End() > exit {
			t.Errorf("sample [%d, %d] after the exit at %d", smp.Time, smp.End(), exit)
		}
	}
	again := rec.Cut(exit)
	if again.Start() != rec.End() {
		t.Errorf("cutting a stopped recording: the next begins at %d, want its end %d", again.Start(), rec.End())
	}
}
