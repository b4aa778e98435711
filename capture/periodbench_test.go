package capture

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// BenchmarkPeriodsMemory: a session profiling a real Node.js --perf-prof
// target continuously (97 Hz, no flight recorder) while the target
// compiles ten new functions a second, cut into STALLWATCH_PERIODS
// periods (1,000 by default) of 100 ms each, every one built into its
// pprof and written (gzip) as the periods' store writes it. It reports
// the Go heap in use after a collection and the process's RSS, after the
// first 100 periods and after the last: what a session holds after
// 1,000 periods (goal: stallwatch's RSS within 40 MB), and whether it
// grows with the periods. 100 ms periods instead of --profile-period's
// 1 s at least: what is kept per period shows ten times sooner.
func BenchmarkPeriodsMemory(b *testing.B) {
	testutil.RequirePerf(b)
	node := testutil.RequireTool(b, "node")
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("STALLWATCH_PERIODS")); err == nil && v >= 200 {
		n = v
	}
	for b.Loop() {
		periodsMemory(b, node, n)
	}
	b.ReportMetric(0, "ns/op")
}

func periodsMemory(b *testing.B, node string, n int) {
	dir := b.TempDir()
	cmd := exec.Command(node, "--perf-prof", testutil.Testdata(b, "node", "fib.js"), "22")
	cmd.Dir = dir
	compile, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	tg := testutil.StartCmd(b, cmd)
	tg.WaitLine(b, "ready", 30*time.Second)
	go func() { _, _ = io.Copy(io.Discard, tg.Stdout) }()
	s, err := Open(Config{PID: tg.Pid, Out: b.TempDir(), NoFlightRecorder: true, Profile: true, NoOffCPU: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	host := testutil.WatchHost(tg.Pid)
	var heap0, rss0 float64
	samples, fn := 0, 0
	var buf bytes.Buffer
	for i := range n {
		time.Sleep(100 * time.Millisecond)
		if _, err := fmt.Fprintf(compile, "compile period%d\n", fn); err != nil {
			b.Fatal(err)
		}
		fn++
		p, err := s.Period(Now())
		if err != nil {
			b.Fatal(err)
		}
		samples += p.Samples
		buf.Reset()
		if err := p.Profile.Write(&buf); err != nil {
			b.Fatal(err)
		}
		if i == 99 {
			heap0, rss0 = heapMB(), rssMB(b)
		}
	}
	heap, rss := heapMB(), rssMB(b)
	load := host.Stop()
	b.Logf("%d periods, %d samples, %d functions compiled: heap %.1f MB after 100 periods, %.1f MB after %d; RSS %.1f MB, %.1f MB; %v",
		n, samples, fn, heap0, heap, n, rss0, rss, load)
	b.ReportMetric(heap, "heap-MB")
	b.ReportMetric(heap-heap0, "heap-MB-growth")
	b.ReportMetric(rss, "rss-MB")
	b.ReportMetric(rss/40, "rss-of-budget")
	load.Report(b)
}

// heapMB is the Go heap in use after a collection, in MB.
func heapMB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / 1e6
}

// rssMB is this process's resident memory, in MB.
func rssMB(b *testing.B) float64 {
	st, err := os.ReadFile(procfs.PidPath(os.Getpid(), "status"))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}
