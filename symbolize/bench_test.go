package symbolize

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/sampler"
)

// Benchmarks run on a live Node.js process with --perf-prof: a 98 MB
// binary with symbols and some DWARF, libc (with its debug file when the
// machine has one), the kernel, and V8's JIT code.

// benchSamples records on-CPU samples with kernel and user stacks, for
// cpu of the target's CPU time.
func benchSamples(b *testing.B, pid int, cpu time.Duration) []sampler.Sample {
	b.Helper()
	var out []sampler.Sample
	samples, _ := record(b, pid, cpu, true)
	for _, s := range samples {
		if s.Kind == sampler.OnCPU && len(s.Stack) > 0 {
			out = append(out, s)
		}
	}
	if len(out) < 100 {
		b.Fatalf("only %d samples", len(out))
	}
	return out
}

// BenchmarkLocateWarm: Locate over the addresses of real stacks (kernel,
// native, JIT) once every location is cached.
func BenchmarkLocateWarm(b *testing.B) {
	tg, _ := startNode(b)
	samples := benchSamples(b, tg.Pid, time.Second)
	p := newTestProcess(b, tg.Pid, testOptions{JIT: true, Kernel: true})
	var addrs []Addr
	for _, s := range samples {
		for i, pc := range s.Stack {
			addrs = append(addrs, Addr{PC: pc, Time: s.Time, Kernel: i < int(s.Kernel), Return: i != 0 && i != int(s.Kernel)})
		}
	}
	var kernel, jit, native int
	for _, a := range addrs {
		switch p.Locate(a).Kind {
		case model.KindKernel:
			kernel++
		case model.KindJIT:
			jit++
		case model.KindNative:
			native++
		}
	}
	b.ResetTimer()
	start, startCPU := time.Now(), cpuTime()
	n := 0
	for b.Loop() {
		for _, a := range addrs {
			p.Locate(a)
		}
		n += len(addrs)
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(n), "ns/locate")
	b.ReportMetric(float64((cpuTime()-startCPU).Nanoseconds())/float64(n), "cpu-ns/locate")
	b.ReportMetric(100*float64(kernel)/float64(len(addrs)), "%kernel")
	b.ReportMetric(100*float64(native)/float64(len(addrs)), "%native")
	b.ReportMetric(100*float64(jit)/float64(len(addrs)), "%jit")
}

// BenchmarkColdFirstLocate: from NewProcess to the first names in node's
// 98 MB binary and in libc (symbols, lines and inline frames), beside
// binutils' addr2line doing the same for the same two addresses.
func BenchmarkColdFirstLocate(b *testing.B) {
	addr2line := testutil.RequireTool(b, "addr2line")
	tg, _ := startNode(b)
	samples := benchSamples(b, tg.Pid, 500*time.Millisecond)
	probe := newTestProcess(b, tg.Pid, testOptions{})
	type target struct {
		a     Addr
		file  string
		vaddr uint64
	}
	var targets []target
	for _, want := range []string{"/node", "/libc.so"} {
	search:
		for _, s := range samples {
			for i, pc := range s.Stack[s.Kernel:] {
				a := Addr{PC: pc, Return: i != 0}
				m := probe.space.ModuleAt(lookupPC(a))
				if m != nil && strings.Contains(m.Path, want) && probe.Locate(a).Kind == model.KindNative {
					targets = append(targets, target{a, m.Path, lookupPC(a) - m.Bias})
					break search
				}
			}
		}
	}
	if len(targets) == 0 {
		b.Fatal("no sampled address in node or libc")
	}
	var theirsCPU time.Duration
	theirs := medianOf(3, func() {
		theirsCPU = 0
		for _, t := range targets {
			theirsCPU += runCPU(b, exec.Command(addr2line, "-f", "-i", "-C", "-e", t.file, fmt.Sprintf("%#x", t.vaddr)))
		}
	})
	b.ResetTimer()
	start, startCPU := time.Now(), cpuTime()
	for b.Loop() {
		resetFileCache()
		p, err := openTest(tg.Pid, testOptions{})
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range targets {
			p.Locate(t.a)
		}
		p.Close()
	}
	ours := time.Since(start) / time.Duration(b.N)
	oursCPU := (cpuTime() - startCPU) / time.Duration(b.N)
	b.ReportMetric(float64(ours.Microseconds())/1000, "ms/cold")
	b.ReportMetric(float64(oursCPU.Microseconds())/1000, "cpu-ms/cold")
	b.ReportMetric(float64(theirs.Microseconds())/1000, "addr2line-ms")
	b.ReportMetric(float64(theirsCPU.Microseconds())/1000, "addr2line-cpu-ms")
	b.ReportMetric(float64(oursCPU)/float64(theirsCPU), "cpu-x-vs-addr2line")
	b.ReportMetric(float64(len(targets)), "files")
}

// cpuTime is this process's user and system CPU time so far: on a
// machine shared with other work, CPU time compares runs where wall time
// mostly measures the neighbours.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// runCPU runs cmd and returns the CPU time it used.
func runCPU(b *testing.B, cmd *exec.Cmd) time.Duration {
	b.Helper()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", cmd.Path, err, out)
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

func medianOf(n int, f func()) time.Duration {
	ds := make([]time.Duration, n)
	for i := range ds {
		start := time.Now()
		f()
		ds[i] = time.Since(start)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[n/2]
}

// BenchmarkSymbolize100k: everything symbolization does for 100,000
// samples of real stacks (a recording repeated, as a long capture repeats
// its hot stacks), from NewProcess with cold caches to the last Locate,
// beside `perf report` on a recording of the same process by `perf
// record -g` (perf names native and kernel frames there; it cannot name
// the JIT's without perf inject).
func BenchmarkSymbolize100k(b *testing.B) {
	perf := testutil.RequireTool(b, "perf")
	tg, _ := startNode(b)
	recorded := benchSamples(b, tg.Pid, 2*time.Second)
	const total = 100_000
	samples := make([]sampler.Sample, total)
	for i := range samples {
		samples[i] = recorded[i%len(recorded)]
	}

	// perf gets as many samples to report as we symbolize: node keeps one
	// thread busy, so 20 kHz for 5 s.
	data := filepath.Join(b.TempDir(), "perf.data")
	if out, err := exec.Command(perf, "record", "-q", "-F", "20000", "-g", "-k", "mono", "-o", data, "-p", fmt.Sprint(tg.Pid), "--", "sleep", "5").CombinedOutput(); err != nil {
		b.Fatalf("perf record: %v\n%s", err, out)
	}
	perfN, err := testutil.PerfSamples(perf, data)
	if err != nil {
		b.Fatal(err)
	}
	// cold: the first capture of a target; files: a later capture, whose
	// files' tables stallwatch read before.
	for _, mode := range []string{"cold", "files-cached"} {
		b.Run(mode, func(b *testing.B) {
			// perf report in every run, beside ours: cold like ours
			// for the cold run (perf.data and the files perf reads
			// dropped from the page cache), warm else.
			if mode == "cold" {
				dropPerfInputs(b, tg.Pid, data)
			} else {
				warmPerfInputs(b, tg.Pid, data)
			}
			host := testutil.WatchHost(tg.Pid)
			t0 := time.Now()
			theirsCPU := runCPU(b, exec.Command(perf, "report", "-i", data, "--stdio"))
			theirs := time.Since(t0)
			var locs []*model.Location
			startCPU := cpuTime()
			for b.Loop() {
				if mode == "cold" {
					b.StopTimer()
					dropPerfInputs(b, tg.Pid, data)
					resetFileCache()
					b.StartTimer()
				}
				p, err := openTest(tg.Pid, testOptions{JIT: true, Kernel: true})
				if err != nil {
					b.Fatal(err)
				}
				for _, s := range samples {
					locs = p.LocateStack(locs[:0], s.Stack, int(s.Kernel), s.Time)
				}
				p.Close()
			}
			ours := b.Elapsed() / time.Duration(b.N)
			oursCPU := (cpuTime() - startCPU) / time.Duration(b.N)
			host.Stop().Report(b)
			b.ReportMetric(float64(ours.Microseconds())/1000, "ms/100k-samples")
			b.ReportMetric(float64(oursCPU.Microseconds())/1000, "cpu-ms/100k-samples")
			b.ReportMetric(float64(theirs.Microseconds())/1000, "perf-report-ms")
			b.ReportMetric(float64(theirsCPU.Microseconds())/1000, "perf-report-cpu-ms")
			b.ReportMetric(float64(oursCPU)/float64(theirsCPU), "cpu-x-vs-perf-report")
			b.ReportMetric(float64(len(recorded)), "distinct-samples")
			b.ReportMetric(float64(perfN), "perf-samples")
			if fi, err := os.Stat(data); err == nil {
				b.ReportMetric(float64(fi.Size())/(1<<20), "perf.data-MB")
			}
		})
	}
}

// dropPerfInputs drops from the page cache what symbolizing pid's samples
// and perf report read (testutil.PerfInputs).
func dropPerfInputs(b *testing.B, pid int, data string) {
	files, err := testutil.PerfInputs(pid, data)
	if err != nil {
		b.Fatal(err)
	}
	testutil.DropPageCache(files)
}

// warmPerfInputs reads them into the page cache.
func warmPerfInputs(b *testing.B, pid int, data string) {
	files, err := testutil.PerfInputs(pid, data)
	if err != nil {
		b.Fatal(err)
	}
	testutil.WarmPageCache(files)
}

// resetFileCache forgets every file's tables.
func resetFileCache() { objfile.ResetCache() }
