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

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/sampler"
)

// Benchmarks run on a live Node.js process with --perf-prof: a 98 MB
// binary with symbols and some DWARF, libc (with its debug file when the
// machine has one), the kernel, and V8's JIT code.

// benchSamples records on-CPU samples with kernel and user stacks.
func benchSamples(b *testing.B, pid int, d time.Duration) []sampler.Sample {
	b.Helper()
	var out []sampler.Sample
	for _, s := range record(b, pid, d, true) {
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
	p := newTestProcess(b, tg.Pid, Options{JIT: true, Kernel: true})
	var addrs []Addr
	for _, s := range samples {
		for i, pc := range s.Stack {
			addrs = append(addrs, Addr{PC: pc, Time: s.Time, Kernel: i < int(s.Kernel), Return: i != 0 && i != int(s.Kernel)})
		}
	}
	var kernel, jit, native int
	for _, a := range addrs {
		switch p.Locate(a).Kind {
		case KindKernel:
			kernel++
		case KindJIT:
			jit++
		case KindNative:
			native++
		}
	}
	b.ResetTimer()
	start := time.Now()
	n := 0
	for b.Loop() {
		for _, a := range addrs {
			p.Locate(a)
		}
		n += len(addrs)
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(n), "ns/locate")
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
	probe := newTestProcess(b, tg.Pid, Options{})
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
				m := probe.mappingAt(lookupPC(a))
				if m != nil && strings.Contains(m.pm.Path, want) && probe.Locate(a).Kind == KindNative {
					targets = append(targets, target{a, m.pm.Path, lookupPC(a) - m.bias})
					break search
				}
			}
		}
	}
	if len(targets) == 0 {
		b.Fatal("no sampled address in node or libc")
	}
	theirs := medianOf(3, func() {
		for _, t := range targets {
			out, err := exec.Command(addr2line, "-f", "-i", "-C", "-e", t.file, fmt.Sprintf("%#x", t.vaddr)).CombinedOutput()
			if err != nil {
				b.Fatalf("addr2line: %v\n%s", err, out)
			}
		}
	})
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		p, err := NewProcess(tg.Pid, Options{})
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range targets {
			p.Locate(t.a)
		}
		p.Close()
	}
	ours := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(ours.Microseconds())/1000, "ms/cold")
	b.ReportMetric(float64(theirs.Microseconds())/1000, "addr2line-ms")
	b.ReportMetric(float64(ours)/float64(theirs), "x-vs-addr2line")
	b.ReportMetric(float64(len(targets)), "files")
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

	data := filepath.Join(b.TempDir(), "perf.data")
	if out, err := exec.Command(perf, "record", "-q", "-F", "997", "-g", "-k", "mono", "-o", data, "-p", fmt.Sprint(tg.Pid), "--", "sleep", "2").CombinedOutput(); err != nil {
		b.Fatalf("perf record: %v\n%s", err, out)
	}
	perfSamples := 0
	theirs := medianOf(3, func() {
		cmd := exec.Command(perf, "report", "-i", data, "--stdio", "--no-children", "-g", "none", "-q")
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("perf report: %v", err)
		}
		perfSamples = strings.Count(string(out), "\n")
	})
	_ = perfSamples
	var locs []*Location
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		p, err := NewProcess(tg.Pid, Options{JIT: true, Kernel: true})
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range samples {
			locs = p.LocateStack(locs[:0], s.Stack, int(s.Kernel), s.Time)
		}
		p.Close()
	}
	ours := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(ours.Microseconds())/1000, "ms/100k-samples")
	b.ReportMetric(float64(theirs.Microseconds())/1000, "perf-report-ms")
	b.ReportMetric(float64(ours)/float64(theirs), "x-vs-perf-report")
	b.ReportMetric(float64(len(recorded)), "distinct-samples")
	if fi, err := os.Stat(data); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "perf.data-MB")
	}
}
