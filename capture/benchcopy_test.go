package capture

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/sampler"
	"github.com/stallwatch/stallwatch/target"
	"golang.org/x/sys/unix"
)

// endToPprofCopies is BenchmarkEndToPprofStackCopies' recording: a C
// program without frame pointers sampled with 16 KiB stack copies,
// unwound as the samples arrived (what that cost is measured), and perf's
// recording of it with --call-graph dwarf and the same copy size.
var endToPprofCopies struct {
	once      sync.Once
	err       error
	target    *exec.Cmd
	samples   []sampler.Sample
	unwindCPU time.Duration // spent unwinding the samples as they arrived
	perfData  string
	perfN     int
	perfRep   time.Duration // wall time of `perf report --stdio` on it
	perfCPU   time.Duration // and its CPU time
	dir       string
}

func setupEndToPprofCopies(b *testing.B) {
	e := &endToPprofCopies
	e.once.Do(func() {
		e.dir, e.err = os.MkdirTemp("", "stallwatch-bench-copies-")
		if e.err != nil {
			return
		}
		bin := filepath.Join(e.dir, "nofp")
		if out, err := exec.Command("gcc", "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", bin, testutil.Testdata(b, "nofp", "nofp.c")).CombinedOutput(); err != nil {
			e.err = fmt.Errorf("gcc: %v\n%s", err, out)
			return
		}
		e.target = exec.Command(bin, "-threads", "4", "-depth", "20")
		e.target.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		out, _ := e.target.StdoutPipe()
		if e.err = e.target.Start(); e.err != nil {
			return
		}
		if line, _ := bufio.NewReader(out).ReadString('\n'); !strings.HasPrefix(line, "ready") {
			e.err = fmt.Errorf("nofp did not start: %q", line)
			return
		}
		pid := e.target.Process.Pid
		tp, err := target.Open(pid, target.Options{Kernel: true, JIT: true})
		if err != nil {
			e.err = err
			return
		}
		defer tp.Close()
		var spent time.Duration
		unw := func(us sampler.UserSample, dst []uint64) ([]uint64, unwind.Cut) {
			start := threadCPU()
			dst, cut := tp.Unwinder().UnwindSample(unwindSample(us), unwind.MaxFrames, dst)
			spent += threadCPU() - start
			return dst, cut
		}
		smp, err := sampler.Start(sampler.Config{PID: pid, Freq: 10000, Kernel: true, History: -1, DumpOnCPU: 16 << 10, UserStack: unw})
		if err != nil {
			e.err = err
			return
		}
		rec := smp.StartRecording()
		start := time.Now()
		for smp.Stats().Samples < wantSamples && time.Since(start) < 5*time.Minute {
			time.Sleep(100 * time.Millisecond)
		}
		e.samples = rec.Stop()
		took := time.Since(start)
		smp.Close()
		e.unwindCPU = spent

		e.perfData = filepath.Join(e.dir, "perf.data")
		perf := exec.Command("perf", "record", "-q", "-F", "10000", "--call-graph", "dwarf,16384", "-k", "mono", "-o", e.perfData,
			"-p", strconv.Itoa(pid), "--", "sleep", strconv.FormatFloat(took.Seconds(), 'f', 1, 64))
		if out, err := perf.CombinedOutput(); err != nil {
			e.err = fmt.Errorf("perf record: %v\n%s", err, out)
			return
		}
		// One run: unwinding 100,000 copies, perf report takes minutes.
		rep := exec.Command("perf", "report", "-i", e.perfData, "--stdio")
		t0 := time.Now()
		if err := rep.Run(); err != nil {
			e.err = fmt.Errorf("perf report: %v", err)
			return
		}
		e.perfRep = time.Since(t0)
		e.perfCPU = rep.ProcessState.UserTime() + rep.ProcessState.SystemTime()
		e.perfN, _ = testutil.PerfSamples("perf", e.perfData)
	})
	if e.err != nil {
		b.Fatal(e.err)
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// BenchmarkEndToPprofStackCopies: the end of a 100,000-sample recording
// with 16 KiB stack copies of a C program without frame pointers, to a
// written capture directory, beside `perf report --stdio` on perf's
// --call-graph dwarf recording of the same process (which unwinds its
// copies then). Ours unwound each sample as it arrived: that CPU is
// reported too, and added to the end's for x-faster-than-perf-report.
//
//	go test -run '^$' -bench EndToPprofStackCopies ./capture
func BenchmarkEndToPprofStackCopies(b *testing.B) {
	testutil.RequirePerf(b)
	testutil.RequireTool(b, "perf")
	testutil.RequireTool(b, "gcc")
	setupEndToPprofCopies(b)
	e := &endToPprofCopies
	pid := e.target.Process.Pid
	end, endCPU := writeCaptures(b, pid, e.samples, UnwindCFI)
	b.ReportMetric(float64(len(e.samples)), "samples")
	b.ReportMetric(end, "s/pprof")
	b.ReportMetric(endCPU, "cpu-s/pprof")
	b.ReportMetric(e.unwindCPU.Seconds(), "unwind-cpu-s-while-recording")
	b.ReportMetric(float64(e.perfN), "perf-samples")
	b.ReportMetric(e.perfRep.Seconds(), "s/perf-report")
	b.ReportMetric(e.perfCPU.Seconds(), "cpu-s/perf-report")
	b.ReportMetric(e.perfCPU.Seconds()/(endCPU+e.unwindCPU.Seconds()), "x-faster-than-perf-report-cpu")
}

// BenchmarkFlightRecorderRSS: stallwatch's resident memory while it
// watches a target with the flight recorder on (the defaults: 49 Hz, 30 s
// of history, CFI unwinding with 16 KiB stack copies), once the history is
// full, for 8 and 1,000 busy threads. Samples are reduced to stacks as
// they arrive: no stack copy is held.
//
//	go test -run '^$' -bench FlightRecorderRSS -benchtime 1x ./capture
func BenchmarkFlightRecorderRSS(b *testing.B) {
	testutil.RequirePerf(b)
	gcc := testutil.RequireTool(b, "gcc")
	bin := filepath.Join(b.TempDir(), "nofp")
	if out, err := exec.Command(gcc, "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", bin, testutil.Testdata(b, "nofp", "nofp.c")).CombinedOutput(); err != nil {
		b.Fatalf("gcc: %v\n%s", err, out)
	}
	for _, threads := range []int{8, 1000} {
		b.Run(fmt.Sprintf("threads-%d", threads), func(b *testing.B) {
			for b.Loop() {
				tg := testutil.Start(b, bin, "-threads", strconv.Itoa(threads), "-depth", "5")
				tg.WaitLine(b, "ready", 60*time.Second)
				runtime.GC()
				rss0 := selfStatus("VmRSS")
				s, err := Open(Config{PID: tg.Pid, Out: b.TempDir(), Unwind: UnwindCFI})
				if err != nil {
					b.Fatal(err)
				}
				time.Sleep(DefaultHistory + 5*time.Second) // the history full
				st := s.smp.Stats()
				rss := selfStatus("VmRSS")
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				s.Close()
				b.ReportMetric(float64(rss)/(1<<20), "rss-MB")
				b.ReportMetric(float64(rss-rss0)/(1<<20), "rss-growth-MB")
				b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "go-heap-MB")
				b.ReportMetric(float64(st.Samples), "samples")
				b.ReportMetric(float64(st.ThreadsLive), "threads")
			}
		})
	}
}

// selfStatus reads a size field ("VmRSS", "VmHWM") of this process's
// /proc/self/status, in bytes.
func selfStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
