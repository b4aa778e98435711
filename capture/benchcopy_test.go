package capture

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// endToPprofCopies is BenchmarkEndToPprofStackCopies' recording: a C
// program without frame pointers, perf record --call-graph dwarf,16384 at
// 10 kHz (16 KiB stack copies, as --unwind cfi copies), into 16 MiB rings
// (the benchmark is of perf report, not of perf record); the kernel
// throttles such sampling (its interrupt takes long), so the target runs
// 15 s of CPU for 100,000 samples.
var endToPprofCopies perfRecording

// BenchmarkEndToPprofStackCopies: the end of a 100,000-sample recording
// with 16 KiB stack copies of a C program without frame pointers, to a
// written capture directory, beside `perf report --stdio` on the same
// samples (perf's --call-graph dwarf recording, whose copies perf report
// unwinds then). Ours unwinds each sample as it arrives: each run
// unwinds perf's copies so (unwind-cpu-s), and x-faster-cpu compares
// perf report's CPU time with that and the end's together.
//
//	go test -run '^$' -bench EndToPprofStackCopies -count 5 ./capture
func BenchmarkEndToPprofStackCopies(b *testing.B) {
	testutil.RequirePerf(b)
	testutil.RequireTool(b, "perf")
	gcc := testutil.RequireTool(b, "gcc")
	setupPerfRecording(b, &endToPprofCopies, func(dir string) (*exec.Cmd, error) {
		bin := filepath.Join(dir, "nofp")
		if out, err := exec.Command(gcc, "-O2", "-g", "-fomit-frame-pointer", "-pthread", "-o", bin, testutil.Testdata(b, "nofp", "nofp.c")).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("gcc: %v\n%s", err, out)
		}
		return exec.Command(bin, "-threads", "4", "-depth", "20"), nil
	}, wantSamples*150*time.Microsecond, false, "--call-graph", "dwarf,16384", "-m", "16M")
	benchEnd(b, &endToPprofCopies, UnwindCFI, endToPprofCopies.unwindAll)
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
				b.ReportMetric(float64(st.RingBytes)/(1<<20), "rings-MiB")
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
