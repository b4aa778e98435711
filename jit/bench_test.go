package jit

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// cpuTime is this process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// v8LikeDump writes n CODE_LOADs named and laid out as V8 does: code
// pages filled upwards, some addresses reused by later code, a
// CODE_DEBUG_INFO before every fourth function.
func v8LikeDump(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	w := newDumpWriter(false, hdrOpts{})
	addr := uint64(0x7f0000000000)
	t := uint64(1e12)
	var starts []uint64
	for i := range n {
		size := uint64(64 + rng.IntN(2048))
		start := addr
		if len(starts) > 100 && rng.IntN(20) == 0 {
			start = starts[rng.IntN(len(starts))] // reused after a GC
		} else {
			addr += (size + 63) &^ 63
		}
		starts = append(starts, start)
		t += uint64(1000 + rng.IntN(100000))
		file := fmt.Sprintf("/srv/app/src/module%d.js", i%500)
		if i%4 == 0 {
			w.debug(t, start, dbgEntry{start + debugAddrBias, int32(i%900 + 1), 3, file})
		}
		w.load(t, start, size, uint64(i), fmt.Sprintf("JS:*handler%dProcessRequest %s:%d:%d", i, file, i%900+1, i%40+1))
	}
	return w.bytes()
}

var (
	bigIndexOnce sync.Once
	bigIndex     *Index
	bigSymbols   []*Symbol
	bigErr       error
)

// index100k reads a V8-like jitdump of 100,000 functions, once.
func index100k(b *testing.B) (*Index, []*Symbol) {
	bigIndexOnce.Do(func() {
		dir, err := os.MkdirTemp("", "stallwatch-bench-")
		if err != nil {
			bigErr = err
			return
		}
		defer os.RemoveAll(dir)
		p := filepath.Join(dir, "jit-1.dump")
		if bigErr = os.WriteFile(p, v8LikeDump(100_000), 0o644); bigErr != nil {
			return
		}
		ix, info, err := ReadFile(p, Options{})
		if err != nil || info.Symbols != 100_000 {
			bigErr = fmt.Errorf("%+v %v", info, err)
			return
		}
		bigIndex = ix
		for s := range ix.All() {
			bigSymbols = append(bigSymbols, s)
		}
	})
	if bigErr != nil {
		b.Fatal(bigErr)
	}
	return bigIndex, bigSymbols
}

// Lookups at random times and addresses inside code on an index of
// 100,000 symbols with reused addresses (goal: 10 million per second).
func BenchmarkLookupAt(b *testing.B) {
	ix, syms := index100k(b)
	rng := rand.New(rand.NewPCG(3, 4))
	type q struct{ addr, t uint64 }
	qs := make([]q, 1<<16)
	for i := range qs {
		s := syms[rng.IntN(len(syms))]
		qs[i] = q{s.Start + uint64(rng.IntN(int(s.Size))), s.Loaded + uint64(rng.IntN(1e9))}
	}
	found := 0
	runtime.GC() // the setup's garbage is not the lookups' cost
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, ok := ix.LookupAt(qs[i&(len(qs)-1)].addr, qs[i&(len(qs)-1)].t); ok {
			found++
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	b.ReportMetric(float64(b.N)/(cpuTime()-cpu0).Seconds(), "lookups/cpu-s")
	if found == 0 {
		b.Fatal("nothing found")
	}
}

// Lookups of the latest code (no time) on the same index.
func BenchmarkLookup(b *testing.B) {
	ix, syms := index100k(b)
	rng := rand.New(rand.NewPCG(5, 6))
	qs := make([]uint64, 1<<16)
	for i := range qs {
		s := syms[rng.IntN(len(syms))]
		qs[i] = s.Start + uint64(rng.IntN(int(s.Size)))
	}
	runtime.GC()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		ix.Lookup(qs[i&(len(qs)-1)])
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	b.ReportMetric(float64(b.N)/(cpuTime()-cpu0).Seconds(), "lookups/cpu-s")
}

// The memory an index of 100,000 V8-like symbols holds, names and source
// files included (goal: at most 30 MB).
func BenchmarkIndexMemory(b *testing.B) {
	p := filepath.Join(b.TempDir(), "jit-1.dump")
	if err := os.WriteFile(p, v8LikeDump(100_000), 0o644); err != nil {
		b.Fatal(err)
	}
	var heap uint64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ix, _, err := ReadFile(p, Options{})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(ix)
		heap = after.HeapAlloc - before.HeapAlloc
	}
	b.ReportMetric(float64(heap)/1e6, "MB")
	b.ReportMetric(float64(heap)/100_000, "bytes/symbol")
}

// nodeBench is a large jitdump Node.js wrote, and the perf.data of the run
// that wrote it (for perf inject), cached across benchmark runs.
type nodeBench struct {
	dir, dump, perfData string
	err                 error
	perfErr             error // why there is no perf inject figure
}

var (
	nodeBenchOnce sync.Once
	nodeBenchData nodeBench
)

// benchFunctions is how many functions manyfuncs.js makes: about 80 MB of
// jitdump, the size the issue measured perf inject on.
const benchFunctions = 40000

func nodeBenchDump(b *testing.B) nodeBench {
	nodeBenchOnce.Do(func() {
		nb := &nodeBenchData
		node, err := exec.LookPath("node")
		if err != nil {
			nb.err = err
			return
		}
		ver, _ := exec.Command(node, "--version").Output()
		nb.dir = filepath.Join(testutil.HostTempDir(), "stallwatch-bench-jitdump-"+strings.TrimSpace(string(ver)))
		script, err := filepath.Abs("../testdata/node/manyfuncs.js")
		if err != nil {
			nb.err = err
			return
		}
		if dumps, _ := filepath.Glob(filepath.Join(nb.dir, "jit-*.dump")); len(dumps) == 1 {
			nb.dump = dumps[0]
		} else {
			nb.generate(node, script)
		}
		if _, err := os.Stat(filepath.Join(nb.dir, "perf.data")); err == nil {
			nb.perfData = filepath.Join(nb.dir, "perf.data")
		} else if nb.perfErr == nil {
			nb.perfErr = fmt.Errorf("no perf.data: %w", err)
		}
	})
	if nodeBenchData.err != nil {
		testutil.Skip(b, "no Node.js jitdump: %v", nodeBenchData.err)
	}
	return nodeBenchData
}

// generate runs node under `perf record -k mono` when perf works (so that
// perf inject can be compared on the very same dump), else alone.
func (nb *nodeBench) generate(node, script string) {
	os.RemoveAll(nb.dir)
	if nb.err = os.MkdirAll(nb.dir, 0o755); nb.err != nil {
		return
	}
	nodeArgs := []string{node, "--perf-prof", "--interpreted-frames-native-stack", script, fmt.Sprint(benchFunctions)}
	var cmd *exec.Cmd
	if perf, err := exec.LookPath("perf"); err == nil {
		cmd = exec.Command(perf, append([]string{"record", "-k", "mono", "-e", "cpu-clock", "-q", "-o", "perf.data", "--"}, nodeArgs...)...)
	} else {
		nb.perfErr = err
		cmd = exec.Command(nodeArgs[0], nodeArgs[1:]...)
	}
	cmd.Dir = nb.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		if nb.perfErr == nil && cmd.Args[0] != node {
			// perf could not record: make the dump without it.
			nb.perfErr = fmt.Errorf("perf record: %v: %s", err, out)
			os.Remove(filepath.Join(nb.dir, "perf.data"))
			cmd = exec.Command(nodeArgs[0], nodeArgs[1:]...)
			cmd.Dir = nb.dir
			out, err = cmd.CombinedOutput()
		}
		if err != nil {
			nb.err = fmt.Errorf("%v: %s", err, out)
			return
		}
	}
	dumps, _ := filepath.Glob(filepath.Join(nb.dir, "jit-*.dump"))
	if len(dumps) != 1 {
		nb.err = fmt.Errorf("node wrote %v", dumps)
		return
	}
	nb.dump = dumps[0]
}

// perfInject times `perf inject --jit` on the benchmark's perf.data (wall
// and CPU): it turns every function of the dump into an ELF file. Each
// run measures it again.
func perfInject(nb nodeBench) (wall, cpu time.Duration, err error) {
	if nb.perfData == "" {
		return 0, 0, nb.perfErr
	}
	work, err := os.MkdirTemp(nb.dir, "inject-")
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		os.RemoveAll(work)
		// perf inject writes jitted-<pid>-<n>.so beside the dump.
		sos, _ := filepath.Glob(filepath.Join(nb.dir, "jitted-*.so"))
		for _, so := range sos {
			os.Remove(so)
		}
	}()
	cmd := exec.Command("perf", "inject", "--jit", "-i", nb.perfData, "-o", filepath.Join(work, "perf.jit.data"))
	cmd.Dir = nb.dir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	wall = time.Since(start)
	if err != nil {
		return 0, 0, fmt.Errorf("perf inject: %v: %s", err, out)
	}
	if sos, _ := filepath.Glob(filepath.Join(nb.dir, "jitted-*.so")); len(sos) == 0 {
		return 0, 0, fmt.Errorf("perf inject wrote no ELF file: did perf.data see the jitdump's mapping? %s", out)
	}
	return wall, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// Ingest of a large jitdump Node.js wrote, from the page cache (goal:
// 1 GB/s), against `perf inject --jit` on the same dump.
func BenchmarkIngestNodeJitdump(b *testing.B) {
	nb := nodeBenchDump(b)
	fi, err := os.Stat(nb.dump)
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := ReadFile(nb.dump, Options{}); err != nil { // into the page cache
		b.Fatal(err)
	}
	b.SetBytes(fi.Size())
	host := testutil.WatchHost()
	var symbols int
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		ix, info, err := ReadFile(nb.dump, Options{})
		if err != nil || info.Broken != nil {
			b.Fatalf("%v %v", err, info.Broken)
		}
		symbols = ix.Len()
	}
	b.StopTimer()
	cpu := cpuTime() - cpu0
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(fi.Size())*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
	b.ReportMetric(float64(symbols), "symbols")
	if wall, icpu, err := perfInject(nb); err != nil {
		b.Logf("no perf inject figure: %v", err)
	} else {
		b.ReportMetric(wall.Seconds(), "perf-inject-s")
		b.ReportMetric(icpu.Seconds(), "perf-inject-cpu-s")
		b.ReportMetric(wall.Seconds()/per.Seconds(), "x-vs-perf-inject")
		b.ReportMetric(icpu.Seconds()/(cpu.Seconds()/float64(b.N)), "x-vs-perf-inject-cpu")
	}
	host.Stop().Report(b)
}
