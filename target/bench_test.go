package target

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/sampler"
)

// rawSamples records pid's on-CPU samples for cpu of the target's CPU
// time (a loaded machine gives it less of the wall time) with copy bytes
// of stack each, kept raw (no unwinding as they arrive).
func rawSamples(b testing.TB, pid, copy int, cpu time.Duration) []sampler.Sample {
	b.Helper()
	s, err := sampler.Start(sampler.Config{PID: pid, Freq: 997, DumpOnCPU: copy, History: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rec := s.StartRecording()
	testutil.WaitCPU(b, pid, cpu, 60*time.Second)
	var out []sampler.Sample
	for _, smp := range rec.Stop() {
		if len(smp.StackDump) > 0 && len(smp.Stack) > int(smp.Kernel) {
			out = append(out, smp)
		}
	}
	if len(out) < 50 {
		b.Fatalf("%d samples with a stack copy", len(out))
	}
	return out
}

// processCPU is this process's CPU time, from the scheduler's own clock
// (schedstat of every thread).
func processCPU() time.Duration {
	tids, _ := procfs.Threads(os.Getpid())
	var ns uint64
	for _, tid := range tids {
		if ss, err := procfs.ReadSchedstat(os.Getpid(), tid); err == nil {
			ns += ss.RunNanos
		}
	}
	return time.Duration(ns)
}

func sampleOf(s *sampler.Sample, copy int) unwind.Sample {
	return unwind.Sample{
		Regs:  unwind.Regs{IP: s.Regs.IP, SP: s.Regs.SP, BP: s.Regs.BP, BPKnown: true},
		Stack: s.StackDump[:min(copy, len(s.StackDump))],
		FP:    s.Stack[s.Kernel:],
		Time:  s.Time,
	}
}

// workloads are programs whose code keeps no frame pointers.
func workloads(b testing.TB) map[string]*testutil.Target {
	gcc := testutil.RequireTool(b, "gcc")
	bin := filepath.Join(b.TempDir(), "nofp")
	if out, err := exec.Command(gcc, "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", bin, testutil.Testdata(b, "nofp", "nofp.c")).CombinedOutput(); err != nil {
		b.Fatalf("gcc: %v\n%s", err, out)
	}
	out := map[string]*testutil.Target{}
	out["c-depth-20"] = testutil.Start(b, bin, "-depth", "20")
	out["c-depth-20"].WaitLine(b, "ready", 10*time.Second)
	py := testutil.RequireTool(b, "/usr/bin/python3")
	out["debian-python3"] = testutil.Start(b, py, testutil.Testdata(b, "python", "work.py"))
	out["debian-python3"].WaitLine(b, "ready", 30*time.Second)
	// Under -X perf every Python call is a C call through a trampoline:
	// 30 Python frames are 30 runs of the interpreter's C frames.
	py312 := testutil.RequireTool(b, python312)
	out["cpython3.12-perf-depth-30"] = testutil.Start(b, py312, "-X", "perf", testutil.Testdata(b, "python", "work.py"), "30")
	out["cpython3.12-perf-depth-30"].WaitLine(b, "ready", 30*time.Second)
	node := testutil.RequireTool(b, "node")
	out["node"] = testutil.Start(b, node, testutil.Testdata(b, "node", "fib.js"))
	out["node"].WaitLine(b, "ready", 30*time.Second)
	// What the docs recommend for Node.js's frames in native stacks:
	// each JavaScript frame interpreted gets a native frame of its own.
	out["node-interpreted-frames-native-stack"] = testutil.Start(b, node, "--interpreted-frames-native-stack", testutil.Testdata(b, "node", "fib.js"))
	out["node-interpreted-frames-native-stack"].WaitLine(b, "ready", 30*time.Second)
	// A recursive descent parser 200 levels deep, three JavaScript frames
	// a level, with the same flag: the deep stacks fib.js does not have.
	out["node-parse-200-interpreted-frames-native-stack"] = testutil.Start(b, node, "--interpreted-frames-native-stack", testutil.Testdata(b, "node", "parse.js"), "200")
	out["node-parse-200-interpreted-frames-native-stack"].WaitLine(b, "ready", 30*time.Second)
	return out
}

// BenchmarkUnwindSamples: samples unwound per second on one core, warm
// (the tables read, the return addresses checked once, the rule cache
// filled): what the sampler's reader spends as samples arrive. The goal is
// 200,000 a second. The reader unwinds a sample from its ring buffer just
// after the kernel wrote it there, so each stack copy is first written
// into a ring-sized buffer (arrivalRing) and unwound from it, and the walks
// alone are timed by the thread's CPU clock: the kernel makes the copies
// in a capture, on the target's time, and the process's other goroutines
// (JIT file followers, the host watcher: 0.4 µs a sample here) run whether
// samples are unwound or not. The same samples are also unwound from where
// they were recorded, in turn, by the process's CPU time
// (backlog-samples/cpu-s): about 2,000 copies of 16 KiB, out of the caches
// by the time each comes round again, as a reader that fell behind would
// find them; the walk's loads of return addresses then wait on memory,
// which cost 5-30% here, the more the busier the host. Then
// the rule cache is turned off and the samples unwound again as they
// arrive (uncached-samples/cpu-s), for the cache's ratio.
//
//	go test -run '^$' -bench UnwindSamples ./target
func BenchmarkUnwindSamples(b *testing.B) {
	testutil.RequirePerf(b)
	for name, tg := range workloads(b) {
		b.Run(name, func(b *testing.B) {
			host := testutil.WatchHost(tg.Pid)
			defer func() { host.Stop().Report(b) }()
			raw := rawSamples(b, tg.Pid, 16<<10, 2*time.Second)
			tp, err := Open(tg.Pid, Options{JIT: true})
			if err != nil {
				b.Fatal(err)
			}
			defer tp.Close()
			u := tp.Unwinder()
			var dst []uint64
			frames := 0
			for i := range raw { // warm
				dst, _ = u.UnwindSample(sampleOf(&raw[i], 16<<10), unwind.MaxFrames, dst[:0])
				frames += len(dst)
			}
			b.ResetTimer()
			// Labelled, so that a -cpuprofile tells the two loops
			// apart (go tool pprof -tagfocus rules=cached).
			ctx := pprof.WithLabels(context.Background(), pprof.Labels("rules", "cached"))
			pprof.SetGoroutineLabels(ctx)
			cached := arrivalRate(u, raw, b.Loop)
			b.StopTimer()
			cpu0, n := processCPU(), 0
			for pass := 0; pass < 20; pass++ {
				for i := range raw {
					dst, _ = u.UnwindSample(sampleOf(&raw[i], 16<<10), unwind.MaxFrames, dst[:0])
					n++
				}
			}
			backlog := float64(n) / (processCPU() - cpu0).Seconds()
			// The same walks without the rule cache, for its share.
			pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("rules", "uncached")))
			u.SetRuleCache(false)
			left, start := 10*len(raw), time.Now()
			uncached := arrivalRate(u, raw, func() bool {
				left--
				return left >= 0 || time.Since(start) < 300*time.Millisecond
			})
			u.SetRuleCache(true)
			pprof.SetGoroutineLabels(context.Background())
			b.ReportMetric(cached, "samples/cpu-s")
			b.ReportMetric(backlog, "backlog-samples/cpu-s")
			b.ReportMetric(uncached, "uncached-samples/cpu-s")
			b.ReportMetric(cached/uncached, "x-vs-uncached")
			b.ReportMetric(float64(frames)/float64(len(raw)), "frames/sample")
		})
	}
}

// arrivalRing is the ring buffer BenchmarkUnwindSamples writes each
// stack copy into before unwinding it: 1 MiB, the order of a thread's
// ring at the defaults (sampler.Config.RingBytes).
const arrivalRing = 1 << 20

// arrivalRate unwinds raw's samples in turn, as long as more says, each
// from a ring-sized buffer its copy was just written into, and returns the
// samples unwound per second of the walks alone: the thread's own CPU
// clock, read per ring of samples, counts the walks and not the copies,
// which the kernel makes in a capture.
func arrivalRate(u *unwind.Process, raw []sampler.Sample, more func() bool) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ring, slots := make([]byte, arrivalRing), make([]unwind.Sample, 0, arrivalRing/(16<<10))
	slots = arrive(ring, slots, raw, 0)
	var dst []uint64
	var spent time.Duration
	n, next, t0 := 0, 0, testutil.ThreadCPU()
	for more() {
		if next == len(slots) {
			spent += testutil.ThreadCPU() - t0
			slots, next = arrive(ring, slots[:0], raw, n), 0
			t0 = testutil.ThreadCPU()
		}
		dst, _ = u.UnwindSample(slots[next], unwind.MaxFrames, dst[:0])
		next++
		n++
	}
	spent += testutil.ThreadCPU() - t0
	return float64(n) / spent.Seconds()
}

// arrive writes the stack copies of raw's samples from the i-th on into
// ring, as many as it holds, and appends those samples, reading their
// copies there, to slots.
func arrive(ring []byte, slots []unwind.Sample, raw []sampler.Sample, i int) []unwind.Sample {
	at := 0
	for ; len(slots) < cap(slots); i++ {
		smp := sampleOf(&raw[i%len(raw)], 16<<10)
		if at+len(smp.Stack) > len(ring) {
			break
		}
		smp.Stack = ring[at : at+copy(ring[at:], smp.Stack)]
		at += len(smp.Stack)
		slots = append(slots, smp)
	}
	return slots
}

// BenchmarkStackCopySize: how much stack a sample must copy. Samples are
// taken with the largest copy the kernel allows; each (of 500 at most,
// spread over the recording) is unwound again to find the least copy
// that gives the same stack, and the share of samples whole within 4, 8,
// 16 and 32 KiB is reported, with the bytes the walks needed
// (percentiles). It chose the default --stack-copy. Then the
// target is sampled as captures do by default, copies of 16 KiB growing
// per thread as its stacks need (%-complete-default, and the largest
// copy a thread grew to: default-bytes-max).
//
//	go test -run '^$' -bench StackCopySize ./target
func BenchmarkStackCopySize(b *testing.B) {
	testutil.RequirePerf(b)
	for name, tg := range workloads(b) {
		b.Run(name, func(b *testing.B) {
			host := testutil.WatchHost(tg.Pid)
			defer func() { host.Stop().Report(b) }()
			raw := spread(rawSamples(b, tg.Pid, sampler.MaxStackCopy, 2*time.Second), bisected)
			tp, err := Open(tg.Pid, Options{JIT: true})
			if err != nil {
				b.Fatal(err)
			}
			defer tp.Close()
			u := tp.Unwinder()
			for b.Loop() {
				var need []int
				for i := range raw {
					s := sampleOf(&raw[i], sampler.MaxStackCopy)
					full, cut := u.UnwindSample(s, unwind.MaxFrames, nil)
					if cut.Truncated() {
						continue
					}
					// The least copy that gives the same stack.
					lo, hi := 0, len(s.Stack)
					for lo < hi {
						mid := (lo + hi) / 2 &^ 7
						got, c := u.UnwindSample(sampleOf(&raw[i], mid), unwind.MaxFrames, nil)
						if !c.Truncated() && slices.Equal(got, full) {
							hi = mid
						} else {
							lo = mid + 8
						}
					}
					need = append(need, hi)
				}
				slices.Sort(need)
				pct := func(p float64) float64 { return float64(need[min(len(need)-1, int(p*float64(len(need))))]) }
				b.ReportMetric(pct(0.5), "bytes-p50")
				b.ReportMetric(pct(0.99), "bytes-p99")
				b.ReportMetric(float64(need[len(need)-1]), "bytes-max")
				for _, kib := range []int{4, 8, 16, 32} {
					ok := 0
					for _, n := range need {
						if n <= kib<<10 {
							ok++
						}
					}
					b.ReportMetric(100*float64(ok)/float64(len(raw)), "%-complete-"+strconv.Itoa(kib)+"KiB")
				}
			}
			whole, grownTo := adaptiveShare(b, tg.Pid, u)
			b.ReportMetric(whole, "%-complete-default")
			b.ReportMetric(float64(grownTo), "default-bytes-max")
		})
	}
}

// bisected bounds the samples BenchmarkStackCopySize unwinds a dozen
// times each to find the copy they need: deep JIT stacks take
// milliseconds each (node-parse-200: 395 s for 2,000 samples at load 50).
const bisected = 500

// spread returns at most n of raw, evenly spread over the recording.
func spread(raw []sampler.Sample, n int) []sampler.Sample {
	if len(raw) <= n {
		return raw
	}
	out := make([]sampler.Sample, 0, n)
	for i := range n {
		out = append(out, raw[i*len(raw)/n])
	}
	return out
}

// adaptiveShare samples pid as a capture does by default — copies of
// 16 KiB that grow per thread up to the ceiling as its stacks need
// (sampler.Config.GrowStackCopy) — each stack unwound by u as it arrives,
// and returns the share of the samples that reach their thread's first
// function (in %), with the largest copy a thread grew to.
func adaptiveShare(b *testing.B, pid int, u *unwind.Process) (float64, int) {
	b.Helper()
	var mu sync.Mutex
	whole, total := 0, 0
	s, err := sampler.Start(sampler.Config{PID: pid, Freq: 997, DumpOnCPU: 16 << 10, GrowStackCopy: sampler.MaxStackCopy, History: -1,
		UserStack: func(us sampler.UserSample, dst []uint64) ([]uint64, unwind.Cut) {
			stack, cut := u.UnwindSample(unwind.Sample{Regs: unwind.Regs{IP: us.Regs.IP, SP: us.Regs.SP, BP: us.Regs.BP, BPKnown: true},
				Stack: us.Stack, Asked: us.Asked, FP: us.FP, Time: us.Time}, unwind.MaxFrames, dst)
			if len(us.Stack) > 0 {
				mu.Lock()
				total++
				if !cut.Truncated() {
					whole++
				}
				mu.Unlock()
			}
			return stack, cut
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	testutil.WaitCPU(b, pid, 2*time.Second, 60*time.Second)
	grown := 0
	for _, t := range s.Threads() {
		grown = max(grown, t.StackCopy)
	}
	mu.Lock()
	defer mu.Unlock()
	if total == 0 {
		b.Fatal("no samples with a stack copy")
	}
	return 100 * float64(whole) / float64(total), grown
}
