package snapshot

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// BenchmarkSnapshot: the wall time of a snapshot of a process of 100 and
// of 1,000 sleeping threads, the longest single-thread stop, and gdb's
// `thread apply all bt` on the same process for comparison (x-vs-gdb is
// our time over gdb's: below 1 is faster). A stop is measured from
// PTRACE_INTERRUPT to PTRACE_DETACH (an upper bound: it includes the time
// the thread takes to be scheduled into the stop) and, as "held", from
// when the stop was seen (a lower bound: what stallwatch itself holds).
func BenchmarkSnapshot(b *testing.B) {
	testutil.RequirePtrace(b)
	gdb := testutil.RequireTool(b, "gdb")
	for _, n := range []int{100, 1000} {
		b.Run("threads="+strconv.Itoa(n), func(b *testing.B) {
			bin := testutil.BuildC(b, "manythreads/manythreads.c")
			tg := testutil.Start(b, bin, strconv.Itoa(n))
			tg.WaitLine(b, "ready ", 60*time.Second)
			var ours, theirs time.Duration
			var maxStop time.Duration
			var stops, held []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				snap, err := Take(context.Background(), tg.Pid, Options{})
				if err != nil {
					b.Fatal(err)
				}
				ours += time.Since(start)
				if len(snap.Threads) != n+1 {
					b.Fatalf("%d threads, want %d", len(snap.Threads), n+1)
				}
				maxStop = max(maxStop, snap.MaxStop)
				for _, th := range snap.Threads {
					if th.Stopped {
						stops = append(stops, th.Stop)
						held = append(held, th.StopHeld)
					}
				}
				b.StopTimer()
				start = time.Now()
				out, err := exec.Command(gdb, "-batch", "-nx", "-ex", "thread apply all bt", "-p", strconv.Itoa(tg.Pid)).CombinedOutput()
				if err != nil {
					b.Fatalf("gdb: %v\n%s", err, out)
				}
				theirs += time.Since(start)
				b.StartTimer()
			}
			b.ReportMetric(float64(ours.Milliseconds())/float64(b.N), "ms/snapshot")
			b.ReportMetric(float64(theirs.Milliseconds())/float64(b.N), "gdb-ms")
			b.ReportMetric(float64(maxStop.Microseconds()), "max-stop-µs")
			slices.Sort(stops)
			slices.Sort(held)
			if len(stops) > 0 {
				b.ReportMetric(float64(stops[len(stops)/2].Microseconds()), "median-stop-µs")
				b.ReportMetric(float64(stops[len(stops)*99/100].Microseconds()), "p99-stop-µs")
				b.ReportMetric(float64(held[len(held)/2].Microseconds()), "median-held-µs")
				b.ReportMetric(float64(held[len(held)-1].Microseconds()), "max-held-µs")
			}
			b.ReportMetric(ours.Seconds()/theirs.Seconds(), "x-vs-gdb")
		})
	}
}

// BenchmarkSnapshotPython: a snapshot of a CPython process (Debian's
// python3, no flag) of 200 threads each ten Python calls deep and
// blocked, with every thread's Python frames read from its memory under
// its stop, beside the program's own dump (a SIGUSR1 handler printing
// traceback.format_stack of sys._current_frames(): from the signal to its
// last line). x-vs-own is our time over the program's: below 1 is faster.
func BenchmarkSnapshotPython(b *testing.B) {
	testutil.RequirePtrace(b)
	python := testutil.RequireTool(b, "/usr/bin/python3")
	const n = 200
	tg := testutil.Start(b, python, testutil.Testdata(b, "python", "many.py"), strconv.Itoa(n))
	tg.WaitLine(b, "ready ", 120*time.Second)
	var ours, theirs, maxStop time.Duration
	var stops []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		snap, err := Take(context.Background(), tg.Pid, Options{})
		if err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		pyThreads := 0
		for _, th := range snap.Threads {
			if th.Stopped {
				stops = append(stops, th.Stop)
			}
			names := userNames(&th)
			if slices.Contains(names, "leaf") {
				pyThreads++
			}
		}
		if pyThreads != n {
			b.Fatalf("%d threads with their Python frames, want %d", pyThreads, n)
		}
		maxStop = max(maxStop, snap.MaxStop)
		b.StopTimer()
		start = time.Now()
		if err := syscall.Kill(tg.Pid, syscall.SIGUSR1); err != nil {
			b.Fatal(err)
		}
		tg.WaitLine(b, "end-of-dump", 60*time.Second)
		theirs += time.Since(start)
		b.StartTimer()
	}
	b.ReportMetric(float64(ours.Milliseconds())/float64(b.N), "ms/snapshot")
	b.ReportMetric(float64(theirs.Milliseconds())/float64(b.N), "own-dump-ms")
	b.ReportMetric(float64(maxStop.Microseconds()), "max-stop-µs")
	slices.Sort(stops)
	if len(stops) > 0 {
		b.ReportMetric(float64(stops[len(stops)/2].Microseconds()), "median-stop-µs")
		b.ReportMetric(float64(stops[len(stops)*99/100].Microseconds()), "p99-stop-µs")
	}
	b.ReportMetric(ours.Seconds()/theirs.Seconds(), "x-vs-own")
}
