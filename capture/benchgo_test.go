package capture

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/sampler"
	"github.com/stallwatch/stallwatch/target"
)

// goUnwindMode is a way to sample a Go program's stacks: the bytes of
// stack each sample copies (-1: none, frame pointers alone).
type goUnwindMode struct {
	name string
	copy int
}

// BenchmarkGoUnwindModes: what each way of unwinding a Go program's
// sampled stacks gives and costs. What it gives — the share of on-CPU and
// off-CPU stacks that reach their thread's first function — and our CPU
// per thousand samples (reading the rings, unwinding) are measured on a
// real Go program: gofmt rewriting the standard library's go/ packages,
// from start to exit, at 997 Hz with off-CPU sampling. The target's
// slowdown is measured on testdata/spin (two Go threads that count their
// work per CPU second: the copies cost the target's own CPU time in the
// kernel, which this measures whatever else loads the machine), sampled
// at 997 Hz, before, during and after. The modes run alternately, each
// b.N times; the figures are medians. --unwind auto takes for a pure Go
// program the cheapest mode that reaches 99% or more.
func BenchmarkGoUnwindModes(b *testing.B) {
	testutil.RequirePerf(b)
	gofmt := filepath.Join(goRoot(b, ""), "bin", "gofmt")
	src := filepath.Join(goRoot(b, ""), "src", "go")
	modes := []goUnwindMode{
		{"fp, no copy", -1},
		{fmt.Sprintf("fp + %d B copy (auto)", FramePointerCopy), FramePointerCopy},
		{"cfi, 16 KiB copy", DefaultStackCopy},
	}
	spin := testutil.Start(b, testutil.BuildGo(b, "spin"), "-threads", "2", "-depth", "24", "-report", "100ms")
	spin.WaitLine(b, "ready", 30*time.Second)
	work := testutil.MeterWork(spin)
	results := make([][]goModeRun, len(modes))
	for i := 0; i < b.N; i++ {
		for j, m := range modes {
			r := runGofmtSampled(b, gofmt, src, m)
			r.slowdown = slowdownOf(b, spin.Pid, work, m)
			results[j] = append(results[j], r)
		}
	}
	for j, m := range modes {
		rs := results[j]
		on := medianOf(rs, func(r goModeRun) float64 { return r.share(sampler.OnCPU) })
		off := medianOf(rs, func(r goModeRun) float64 { return r.share(sampler.OffCPU) })
		ours := medianOf(rs, func(r goModeRun) float64 { return 1e6 * r.ourCPU.Seconds() / float64(max(r.samples(), 1)) })
		slow := medianOf(rs, func(r goModeRun) float64 { return r.slowdown })
		b.Logf("%-24s whole: on-CPU %.2f%%, off-CPU %.2f%%; our CPU %.1f ms per 1,000 samples; target slowdown %.1f%%",
			m.name, 100*on, 100*off, ours, 100*slow)
		b.ReportMetric(100*on, fmt.Sprintf("%%whole-oncpu-%s", metricName(m)))
		b.ReportMetric(100*off, fmt.Sprintf("%%whole-offcpu-%s", metricName(m)))
		b.ReportMetric(100*slow, fmt.Sprintf("%%slowdown-%s", metricName(m)))
		b.ReportMetric(ours, fmt.Sprintf("ms/1k-samples-%s", metricName(m)))
	}
}

// slowdownOf samples pid as m says for two seconds and returns how much
// less work per CPU second the target did meanwhile than around it.
func slowdownOf(b *testing.B, pid int, w *testutil.WorkMeter, m goUnwindMode) float64 {
	const window = 2 * time.Second
	before := w.Rate(window)
	tp, err := target.Open(pid, target.Options{Kernel: true})
	if err != nil {
		b.Fatal(err)
	}
	defer tp.Close()
	var mu sync.Mutex
	s, err := sampler.Start(sampler.Config{PID: pid, Freq: DefaultFreq, OffCPU: true, Kernel: true, History: -1,
		DumpOnCPU: m.copy, DumpOffCPU: m.copy,
		UserStack: func(us sampler.UserSample, dst []uint64) ([]uint64, unwind.Cut) {
			mu.Lock()
			defer mu.Unlock()
			return tp.Unwinder().UnwindSample(unwindSample(us), unwind.MaxFrames, dst)
		}})
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	during := w.Rate(window)
	s.Close()
	after := w.Rate(window)
	return 1 - during/((before+after)/2)
}

func metricName(m goUnwindMode) string {
	switch {
	case m.copy < 0:
		return "fp"
	case m.copy == FramePointerCopy:
		return "fp-copy"
	}
	return "cfi"
}

// goModeRun is one sampled run of gofmt, and the slowdown of spin.
type goModeRun struct {
	ourCPU   time.Duration
	total    [2]int // per sampler.Kind
	whole    [2]int
	slowdown float64
}

func (r goModeRun) share(k sampler.Kind) float64 {
	return float64(r.whole[k]) / float64(max(r.total[k], 1))
}

func (r goModeRun) samples() int { return r.total[0] + r.total[1] }

// runGofmtSampled runs gofmt over src to its exit, sampled as m says, and
// returns our CPU time and how many stacks were whole.
func runGofmtSampled(b *testing.B, gofmt, src string, m goUnwindMode) goModeRun {
	b.Helper()
	cmd := exec.Command(gofmt, "-l", "-s", "-r", "a -> a", src)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var run goModeRun
	cpu0 := processCPU()
	tp, err := target.Open(cmd.Process.Pid, target.Options{Kernel: true})
	if err != nil {
		b.Fatal(err)
	}
	defer tp.Close()
	var mu sync.Mutex
	unw := func(us sampler.UserSample, dst []uint64) ([]uint64, unwind.Cut) {
		mu.Lock()
		defer mu.Unlock()
		return tp.Unwinder().UnwindSample(unwindSample(us), unwind.MaxFrames, dst)
	}
	smp, err := sampler.Start(sampler.Config{PID: cmd.Process.Pid, Freq: DefaultFreq, OffCPU: true, Kernel: true,
		History: -1, DumpOnCPU: m.copy, DumpOffCPU: m.copy, UserStack: unw})
	if err != nil {
		b.Fatal(err)
	}
	rec := smp.StartRecording()
	_ = cmd.Wait()
	for _, s := range rec.Stop() {
		if len(s.Stack) <= int(s.Kernel) {
			continue // no user frames: nothing to unwind
		}
		run.total[s.Kind]++
		if !s.Cut.Truncated() {
			run.whole[s.Kind]++
		}
	}
	smp.Close()
	run.ourCPU = processCPU() - cpu0
	return run
}

func medianOf(rs []goModeRun, f func(goModeRun) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}
