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
// sampled stacks gives (the share of on-CPU and off-CPU stacks that reach
// their thread's first function) and costs (the target's slowdown; our
// CPU per thousand samples, reading the rings and unwinding), on a real
// Go program: gofmt rewriting the standard library's go/ packages, from
// start to exit, at 997 Hz with off-CPU sampling, the modes run
// alternately with a run unsampled among them. --unwind auto takes for a
// pure Go program the cheapest mode that reaches 99% or more.
func BenchmarkGoUnwindModes(b *testing.B) {
	testutil.RequirePerf(b)
	gofmt := filepath.Join(goRoot(b, ""), "bin", "gofmt")
	src := filepath.Join(goRoot(b, ""), "src", "go")
	modes := []goUnwindMode{
		{"none (unsampled)", 0},
		{"fp, no copy", -1},
		{fmt.Sprintf("fp + %d B copy (auto)", FramePointerCopy), FramePointerCopy},
		{"cfi, 16 KiB copy", DefaultStackCopy},
	}
	results := make([][]goModeRun, len(modes))
	for i := 0; i < b.N; i++ {
		for j, m := range modes {
			results[j] = append(results[j], runGofmtSampled(b, gofmt, src, m))
		}
	}
	base := medianOf(results[0], func(r goModeRun) float64 { return r.targetCPU.Seconds() })
	for j, m := range modes {
		rs := results[j]
		cpu := medianOf(rs, func(r goModeRun) float64 { return r.targetCPU.Seconds() })
		b.Logf("%-24s target CPU %.2fs (%+.1f%%)", m.name, cpu, 100*(cpu/base-1))
		if j == 0 {
			continue
		}
		on := medianOf(rs, func(r goModeRun) float64 { return r.share(sampler.OnCPU) })
		off := medianOf(rs, func(r goModeRun) float64 { return r.share(sampler.OffCPU) })
		ours := medianOf(rs, func(r goModeRun) float64 { return 1e6 * r.ourCPU.Seconds() / float64(max(r.samples(), 1)) })
		n := medianOf(rs, func(r goModeRun) float64 { return float64(r.samples()) })
		b.Logf("%-24s %6.0f samples, whole: on-CPU %.2f%%, off-CPU %.2f%%; our CPU %.1f ms per 1,000 samples",
			m.name, n, 100*on, 100*off, ours)
		b.ReportMetric(100*on, fmt.Sprintf("%%whole-oncpu-%s", metricName(m)))
		b.ReportMetric(100*off, fmt.Sprintf("%%whole-offcpu-%s", metricName(m)))
		b.ReportMetric(100*(cpu/base-1), fmt.Sprintf("%%slowdown-%s", metricName(m)))
		b.ReportMetric(ours, fmt.Sprintf("ms/1k-samples-%s", metricName(m)))
	}
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

// goModeRun is one sampled run of the target.
type goModeRun struct {
	targetCPU time.Duration
	ourCPU    time.Duration
	total     [2]int // per sampler.Kind
	whole     [2]int
}

func (r goModeRun) share(k sampler.Kind) float64 {
	return float64(r.whole[k]) / float64(max(r.total[k], 1))
}

func (r goModeRun) samples() int { return r.total[0] + r.total[1] }

// runGofmtSampled runs gofmt over src to its exit, sampled as m says, and
// returns its CPU time, ours, and how many stacks were whole.
func runGofmtSampled(b *testing.B, gofmt, src string, m goUnwindMode) goModeRun {
	b.Helper()
	cmd := exec.Command(gofmt, "-l", "-s", "-r", "a -> a", src)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var run goModeRun
	var smp *sampler.Sampler
	var rec *sampler.Recording
	var tp *target.Process
	cpu0 := processCPU()
	if m.name != "none (unsampled)" {
		var err error
		if tp, err = target.Open(cmd.Process.Pid, target.Options{Kernel: true}); err != nil {
			b.Fatal(err)
		}
		var mu sync.Mutex
		unw := func(us sampler.UserSample, dst []uint64) ([]uint64, unwind.Cut) {
			mu.Lock()
			defer mu.Unlock()
			return tp.Unwinder().UnwindSample(unwindSample(us), unwind.MaxFrames, dst)
		}
		smp, err = sampler.Start(sampler.Config{PID: cmd.Process.Pid, Freq: DefaultFreq, OffCPU: true, Kernel: true,
			History: -1, DumpOnCPU: m.copy, DumpOffCPU: m.copy, UserStack: unw})
		if err != nil {
			b.Fatal(err)
		}
		rec = smp.StartRecording()
	}
	_ = cmd.Wait()
	if smp != nil {
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
		tp.Close()
	}
	run.ourCPU = processCPU() - cpu0
	if st, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		run.targetCPU = time.Duration(st.Utime.Nano() + st.Stime.Nano())
	}
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
