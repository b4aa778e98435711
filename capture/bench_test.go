package capture

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/sampler"
	"github.com/stallwatch/stallwatch/target"
)

// endToPprof is BenchmarkEndToPprof's recording: a spinning Go target,
// perf record -g at 10 kHz (frame pointers).
var endToPprof perfRecording

// BenchmarkEndToPprof measures what the user waits for when a recording
// ends: symbolizing 100,000 samples (kernel and user frames), building
// the pprof profile and writing the capture directory, beside `perf
// report --stdio` on the same samples (perf's recording of the target,
// which both read), cold and warm (see perfRecording).
//
//	go test -run '^$' -bench 'EndToPprof$' -count 5 ./capture
func BenchmarkEndToPprof(b *testing.B) {
	testutil.RequirePerf(b)
	testutil.RequireTool(b, "perf")
	setupPerfRecording(b, &endToPprof, func(dir string) (*exec.Cmd, error) {
		bin := filepath.Join(dir, "spin")
		build := exec.Command("go", "build", "-o", bin, ".")
		build.Dir = testutil.Testdata(b, "spin")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build spin: %v\n%s", err, out)
		}
		return exec.Command(bin, "-threads", "4", "-depth", "6"), nil
	}, wantSamples*110*time.Microsecond, true, "-g")
	benchEnd(b, &endToPprof, UnwindFP, func(*testing.B, *target.Process) ([]sampler.Sample, time.Duration) {
		return endToPprof.samples, 0
	})
}

// TestMain stops the benchmarks' targets.
func TestMain(m *testing.M) {
	testutil.Main(m, testutil.RemoveJavaClasses, endToPprof.close, endToPprofCopies.close)
}

// BenchmarkPythonAttribution: what reading Python frames at each sample
// costs, on Debian's python3 running pure Python ten calls deep: the
// target's work per CPU second and stallwatch's own CPU while sampling
// at 997 Hz as a capture does (16 KiB stack copies, unwound as they
// arrive), with the Python frames read at each sample (a wakeup per
// record) and without, each against the unsampled windows beside it.
func BenchmarkPythonAttribution(b *testing.B) {
	testutil.RequirePerf(b)
	testutil.RequirePtrace(b)
	python := testutil.RequireTool(b, "/usr/bin/python3")
	tg := testutil.Start(b, python, testutil.Testdata(b, "python", "pywork.py"))
	tg.WaitLine(b, "ready", 30*time.Second)
	w := testutil.MeterWork(tg)
	cfg := Config{PID: tg.Pid, Out: b.TempDir()}
	if err := cfg.fill(); err != nil {
		b.Fatal(err)
	}
	s, err := newSession(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.tp.Close()
	if s.annot == nil {
		b.Fatalf("no Python annotator: %q", s.notes)
	}
	const window = 2 * time.Second
	sampled := func(py bool) (slow, own, perSample float64) {
		before := w.Rate(window)
		c := s.samplerConfig(997, false, -1)
		if !py {
			c.Annotate, c.PromptWakeup = nil, false
		}
		smp, err := sampler.Start(c)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		st0, own0, t0 := smp.Stats(), ownCPU(), time.Now()
		during := w.Rate(window)
		st, used, wall := smp.Stats(), ownCPU()-own0, time.Since(t0)
		smp.Close()
		after := w.Rate(window)
		n := float64(st.Samples - st0.Samples)
		return 1 - during/((before+after)/2), used.Seconds() / wall.Seconds(), used.Seconds() / n * 1e6
	}
	for i := 0; i < b.N; i++ {
		noSlow, noOwn, noPer := sampled(false)
		pySlow, pyOwn, pyPer := sampled(true)
		b.ReportMetric(100*noSlow, "without-slowdown-%")
		b.ReportMetric(100*pySlow, "python-slowdown-%")
		b.ReportMetric(100*noOwn, "without-own-cpu-%")
		b.ReportMetric(100*pyOwn, "python-own-cpu-%")
		b.ReportMetric(noPer, "without-own-µs/sample")
		b.ReportMetric(pyPer, "python-own-µs/sample")
	}
}

// ownCPU is this process's user and system CPU time so far.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
