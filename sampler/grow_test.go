package sampler

import (
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/internal/unwind"
)

// TestCopyUseThreshold: a thread's copies grow after growAfter walks that
// ran out of a full copy, when they are 1% of its walks or more; copies
// the kernel cut short never count.
func TestCopyUseThreshold(t *testing.T) {
	full := unwind.Cut{Reason: unwind.CopyExhausted, Limit: 16 << 10, Copied: 16 << 10}
	short := unwind.Cut{Reason: unwind.CopyExhausted, Limit: 16 << 10, Copied: 12 << 10}
	for _, tc := range []struct {
		name  string
		walks []unwind.Cut
		want  bool
	}{
		{"one exhausted walk", []unwind.Cut{full}, false},
		{"two exhausted walks", []unwind.Cut{full, full}, true},
		{"short copies", []unwind.Cut{short, short, short, short}, false},
		{"two in 300 walks", append(make([]unwind.Cut, 298), full, full), false},
		{"three in 300 walks", append(make([]unwind.Cut, 297), full, full, full), true},
		{"complete walks", make([]unwind.Cut, 10), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u copyUse
			got := false
			for _, c := range tc.walks {
				got = u.note(c)
			}
			if got != tc.want {
				t.Errorf("grow after %d walks = %v, want %v (%+v)", len(tc.walks), got, tc.want, u)
			}
		})
	}
}

// TestStackCopyGrows: threads whose every stack is deeper than their copy
// (Go goroutines 2,000 frames deep, ~100 KiB of stack, sampled on and off
// the CPU with copies starting at 256 bytes) have their events reopened
// with doubled copies up to the ceiling and no further, each sample asking
// no more than its thread's copy then and no less than before; the
// sampling goes on through each swap (the samples' weights add up to the
// threads' CPU time), and no descriptor is left behind by the eight
// regrowths of each thread, while sampling or after Close.
func TestStackCopyGrows(t *testing.T) {
	testutil.RequirePerf(t)
	tg := startTarget(t, "spin", "-threads", "3", "-depth", "2000")
	const start, ceiling = 256, 40 << 10 // 256 B … 32 KiB, then 40 KiB: eight regrowths
	var mu sync.Mutex
	asked := map[int32][]int{} // the distinct sizes each thread's samples asked, in order
	fd0 := testutil.OpenFDs(t)
	s := mustStart(t, Config{PID: tg.Pid, Freq: 997, OffCPU: true, Kernel: true,
		DumpOnCPU: start, DumpOffCPU: start, GrowStackCopy: ceiling, Logger: testLogger(t),
		UserStack: func(us UserSample, dst []uint64) ([]uint64, unwind.Cut) {
			mu.Lock()
			if a := asked[us.TID]; len(a) == 0 || a[len(a)-1] != us.Asked {
				asked[us.TID] = append(a, us.Asked)
			}
			mu.Unlock()
			// A stand-in for a walk that needs more than the copy: the
			// copy is as large as asked (the stack goes on above it).
			cut := unwind.Cut{}
			if us.Asked > 0 && len(us.Stack) == us.Asked {
				cut = unwind.Cut{Reason: unwind.CopyExhausted, Limit: us.Asked, Copied: len(us.Stack)}
			}
			return append(dst, us.FP...), cut
		}})
	spinners := tidsNamed(s, "spin-")
	if len(spinners) != 3 {
		t.Fatalf("threads named spin-*: %v, want 3", spinners)
	}
	grown := func() bool {
		for _, ti := range s.Threads() {
			if spinners[int32(ti.TID)] && ti.StackCopy != ceiling {
				return false
			}
		}
		return true
	}
	if err := testutil.Eventually(30*time.Second, grown); err != nil {
		t.Fatalf("the spinners' stack copies did not all grow to the ceiling: %v; threads %+v", err, s.Threads())
	}
	rec := s.StartRecording()
	c0 := threadCPU(t, tg.Pid, spinners)
	runFor(t, tg.Pid, spinners, 500*time.Millisecond, 600*time.Millisecond, 10*time.Second)
	samples := rec.Stop()
	c1 := threadCPU(t, tg.Pid, spinners)
	var weight, used uint64
	for _, smp := range samples {
		if smp.Kind == OnCPU && spinners[smp.TID] {
			weight += smp.Weight
		}
	}
	for tid := range spinners {
		used += c1[tid] - c0[tid]
	}
	st := s.Stats()
	// A thread let go and attached again would start over at the
	// smallest copy (below), and a record of a replaced event decoded
	// with the new one's layout would be a bad record.
	if st.ThreadsExited != 0 || st.BadRecords != 0 {
		t.Errorf("%d threads taken for exited, %d bad records: the regrowths broke the threads' events", st.ThreadsExited, st.BadRecords)
	}
	if want := 3 * 8; st.StackCopyGrowths < want || st.StackCopyGrowFailed != 0 {
		t.Errorf("%d regrowths (%d failed), want at least %d", st.StackCopyGrowths, st.StackCopyGrowFailed, want)
	}
	// The recording spans the schedstat readings, so its samples stand
	// for at least most of the CPU time between them.
	if ratio := float64(weight) / float64(used); st.LostRecords == 0 && (ratio < 0.8 || ratio > 1.25) {
		t.Errorf("on-CPU samples weigh %.3f s for %.3f s of the spinners' CPU (%.2f×)", float64(weight)/1e9, float64(used)/1e9, ratio)
	}
	mu.Lock()
	for tid := range spinners {
		sizes := asked[tid]
		for i, n := range sizes {
			if n > ceiling || i > 0 && n < sizes[i-1] {
				t.Errorf("thread %d's samples asked %v bytes: past the %d-byte ceiling, or smaller than before", tid, sizes, ceiling)
				break
			}
		}
		if len(sizes) == 0 || sizes[len(sizes)-1] != ceiling {
			t.Errorf("thread %d's samples asked %v bytes, not the ceiling last", tid, sizes)
		}
	}
	mu.Unlock()
	// The old events go to the closer; once it has run, the descriptors
	// are those of the live threads' events and the sampler's own three
	// (epoll, eventfd, pidfd).
	live := 0
	for _, ti := range s.Threads() {
		if ti.Attached != 0 && ti.Exited == 0 && ti.Err == nil {
			live++
		}
	}
	want := fd0 + 3 + live*s.perThread()
	if err := testutil.Eventually(10*time.Second, func() bool { return testutil.OpenFDs(t) == want }); err != nil {
		t.Errorf("%d descriptors open while sampling, want %d: %d before Start, 3 of the sampler's, %d live threads × %d events", testutil.OpenFDs(t), want, fd0, live, s.perThread())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if fds := testutil.OpenFDs(t); fds != fd0 {
		t.Errorf("%d descriptors open after Close, %d before Start", fds, fd0)
	}
	t.Logf("%d regrowths; sizes %v; on-CPU weight %.3f s for %.3f s of CPU; stats %+v", st.StackCopyGrowths, asked, float64(weight)/1e9, float64(used)/1e9, st)
}
