package snapshot

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/fdtarget"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes"
	"github.com/stallwatch/stallwatch/target"
)

// BenchmarkSnapshot: the wall time of a snapshot of a process of 100 and
// of 1,000 sleeping threads, beside gdb's `thread apply all bt` on the
// same process (x-vs-gdb is our time over gdb's: below 1 is faster), and
// beside the snapshot that stops every thread, as all were before
// threads asleep in a system call were read without a stop (all-stopped-…:
// the stop path's own figures, what a thread that must be stopped
// costs). threads-stopped is how many threads a snapshot stopped. A stop
// is measured from PTRACE_INTERRUPT to PTRACE_DETACH (an upper bound: it
// includes the time the thread takes to be scheduled into the stop) and,
// as "held", from when the stop was seen (a lower bound: what stallwatch
// itself holds).
func BenchmarkSnapshot(b *testing.B) {
	testutil.RequirePtrace(b)
	gdb := testutil.RequireTool(b, "gdb")
	for _, n := range []int{100, 1000} {
		b.Run("threads="+strconv.Itoa(n), func(b *testing.B) {
			bin := testutil.BuildC(b, "manythreads/manythreads.c")
			tg := testutil.Start(b, bin, strconv.Itoa(n))
			tg.WaitLine(b, "ready ", 60*time.Second)
			host := testutil.WatchHost(tg.Pid)
			var ours, all, theirs time.Duration
			var maxStop, allMaxStop time.Duration
			var stops, held []time.Duration
			nstopped := 0
			take := func(opts Options) (*model.Snapshot, time.Duration) {
				start := time.Now()
				snap, err := Take(context.Background(), tg.Pid, opts)
				if err != nil {
					b.Fatal(err)
				}
				d := time.Since(start)
				if len(snap.Threads) != n+1 {
					b.Fatalf("%d threads, want %d", len(snap.Threads), n+1)
				}
				return snap, d
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				snap, d := take(Options{})
				ours += d
				maxStop = max(maxStop, snap.MaxStop)
				for _, th := range snap.Threads {
					if th.Stopped {
						nstopped++
					}
				}
				b.StopTimer()
				snap, d = take(Options{stopSleepers: true})
				all += d
				allMaxStop = max(allMaxStop, snap.MaxStop)
				for _, th := range snap.Threads {
					if th.Stopped {
						stops = append(stops, th.Stop)
						held = append(held, th.StopHeld)
					}
				}
				start := time.Now()
				out, err := exec.Command(gdb, "-batch", "-nx", "-ex", "thread apply all bt", "-p", strconv.Itoa(tg.Pid)).CombinedOutput()
				if err != nil {
					b.Fatalf("gdb: %v\n%s", err, out)
				}
				theirs += time.Since(start)
				b.StartTimer()
			}
			b.ReportMetric(float64(ours.Milliseconds())/float64(b.N), "ms/snapshot")
			b.ReportMetric(float64(all.Milliseconds())/float64(b.N), "all-stopped-ms/snapshot")
			b.ReportMetric(float64(theirs.Milliseconds())/float64(b.N), "gdb-ms")
			b.ReportMetric(float64(nstopped)/float64(b.N), "threads-stopped")
			b.ReportMetric(float64(maxStop.Microseconds()), "max-stop-µs")
			b.ReportMetric(float64(allMaxStop.Microseconds()), "all-stopped-max-stop-µs")
			slices.Sort(stops)
			slices.Sort(held)
			if len(stops) > 0 {
				b.ReportMetric(float64(stops[len(stops)/2].Microseconds()), "median-stop-µs")
				b.ReportMetric(float64(stops[len(stops)*99/100].Microseconds()), "p99-stop-µs")
				b.ReportMetric(float64(held[len(held)/2].Microseconds()), "median-held-µs")
				b.ReportMetric(float64(held[len(held)*99/100].Microseconds()), "p99-held-µs")
				b.ReportMetric(float64(held[len(held)-1].Microseconds()), "max-held-µs")
			}
			b.ReportMetric(ours.Seconds()/theirs.Seconds(), "x-vs-gdb")
			b.ReportMetric(all.Seconds()/theirs.Seconds(), "all-stopped-x-vs-gdb")
			host.Stop().Report(b)
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

// BenchmarkJavaSnapshot: the snapshot of a JVM of 200 Java threads, with
// its Java threads read from its memory, beside the snapshot without them
// (as before the JVM was read) and jstack -l on the same JVM: the wall time
// of each, and the longest any thread was stopped — the snapshot's
// longest ptrace stop, and jstack's safepoint, for which every Java thread
// stops (the VM's own -Xlog:safepoint). The target is opened once, as a
// capture's session does.
func BenchmarkJavaSnapshot(b *testing.B) {
	testutil.RequirePtrace(b)
	jstack := testutil.RequireTool(b, "jstack")
	tg := testutil.StartJava(b, []string{"-Xlog:safepoint"}, "threads", "200")
	log := collectLines(tg)
	tp, err := target.Open(tg.Pid, target.Options{Kernel: true, JIT: true})
	if err != nil {
		b.Fatal(err)
	}
	defer tp.Close()
	// The first snapshot parses libjvm's symbols and unwind tables: a
	// session does that once, before its first capture.
	if _, err := Take(context.Background(), tg.Pid, Options{Target: tp}); err != nil {
		b.Fatal(err)
	}
	walls := map[string]time.Duration{}
	stops := map[string]time.Duration{}
	for _, c := range []struct {
		name   string
		noJava bool
	}{{"without-java", true}, {"with-java", false}} {
		b.Run(c.name, func(b *testing.B) {
			var unread []*runtimes.Runtime
			if c.noJava {
				unread = []*runtimes.Runtime{runtimes.JVM}
			}
			var maxStop time.Duration
			for b.Loop() {
				snap, err := Take(context.Background(), tg.Pid, Options{Target: tp, Unread: unread})
				if err != nil {
					b.Fatal(err)
				}
				if len(snap.Threads) < 200 {
					b.Fatalf("%d threads", len(snap.Threads))
				}
				maxStop = max(maxStop, snap.MaxStop)
			}
			walls[c.name] = b.Elapsed() / time.Duration(b.N)
			stops[c.name] = maxStop
			b.ReportMetric(float64(maxStop.Microseconds())/1000, "max-stop-ms")
		})
	}
	b.Run("jstack", func(b *testing.B) {
		log.take()
		for b.Loop() {
			if out, err := exec.Command(jstack, "-l", strconv.Itoa(tg.Pid)).CombinedOutput(); err != nil {
				b.Fatalf("jstack: %v\n%s", err, out)
			}
		}
		walls["jstack"] = b.Elapsed() / time.Duration(b.N)
		var longest time.Duration
		n := 0
		err := testutil.Eventually(10*time.Second, func() bool {
			for _, l := range log.take() {
				if m := safepointTotal.FindStringSubmatch(l); m != nil && m[1] == "PrintThreads" {
					ns, _ := strconv.ParseInt(m[2], 10, 64)
					longest = max(longest, time.Duration(ns))
					n++
				}
			}
			return n >= b.N
		})
		if err != nil {
			b.Fatalf("the VM logged %d of jstack's %d safepoints", n, b.N)
		}
		stops["jstack"] = longest
		b.ReportMetric(float64(longest.Microseconds())/1000, "max-stop-ms")
	})
	if w := walls["with-java"]; w > 0 && walls["jstack"] > 0 {
		fmt.Printf("JVM of 200 Java threads: snapshot with Java threads %v (longest stop %v), without %v (%v), jstack -l %v (every Java thread stopped up to %v): %.1f× faster than jstack\n",
			w.Round(time.Millisecond), stops["with-java"].Round(10*time.Microsecond), walls["without-java"].Round(time.Millisecond),
			stops["without-java"].Round(10*time.Microsecond), walls["jstack"].Round(time.Millisecond), stops["jstack"].Round(10*time.Microsecond),
			float64(walls["jstack"])/float64(w))
	}
}

// safepointTotal matches the VM's account of a safepoint
// (-Xlog:safepoint): how long every Java thread was stopped for it.
var safepointTotal = regexp.MustCompile(`Safepoint "(\w+)".* Total: (\d+) ns`)

// lines are what a target prints, collected as it prints them.
type lines struct {
	mu sync.Mutex
	l  []string
}

func collectLines(tg *testutil.Target) *lines {
	ls := &lines{}
	go func() {
		for {
			l, err := tg.Stdout.ReadString('\n')
			ls.mu.Lock()
			ls.l = append(ls.l, l)
			ls.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return ls
}

// take returns the lines collected since the last take.
func (ls *lines) take() []string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := ls.l
	ls.l = nil
	return out
}

// BenchmarkSnapshotFDWaits: a snapshot of 1,000 threads each blocked in
// read() on a pipe of its own, and what saying what each descriptor is
// connected to costs of it (resolve-ms: fdtarget.Resolve of the same
// descriptors, timed alone; resolve-share: its share of the snapshot's
// wall time, which includes it).
func BenchmarkSnapshotFDWaits(b *testing.B) {
	testutil.RequirePtrace(b)
	bin := testutil.BuildC(b, "manyfds/manyfds.c")
	tg := testutil.Start(b, bin, "100", "1000")
	tg.WaitLine(b, "ready ", 60*time.Second)
	var ours, resolve time.Duration
	for b.Loop() {
		start := time.Now()
		snap, err := Take(context.Background(), tg.Pid, Options{})
		if err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		var fds []int
		for _, th := range snap.Threads {
			if th.Syscall != nil && fdSyscalls[th.Syscall.Nr] {
				fds = append(fds, int(int32(th.Syscall.Args[0])))
			}
		}
		if len(fds) < 1000 {
			b.Fatalf("%d threads blocked on descriptors, want 1,000", len(fds))
		}
		start = time.Now()
		fdtarget.Resolve(tg.Pid, fds, fdtarget.Options{Syscall: fdSyscallName})
		resolve += time.Since(start)
	}
	b.ReportMetric(float64(ours.Milliseconds())/float64(b.N), "ms/snapshot")
	b.ReportMetric(float64(resolve.Milliseconds())/float64(b.N), "resolve-ms")
	b.ReportMetric(resolve.Seconds()/ours.Seconds(), "resolve-share")
}
