package capture

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// BenchmarkLostSmallTargets: `stallwatch record` at its defaults (997 Hz,
// off-CPU sampling, 16 KiB stack copies on and off the CPU) of a
// single-threaded Python spinner, Debian's 3.11 and CPython 3.12 under -X
// perf, for 4 s, beside `perf record -g` at its defaults on the same
// process at the same time: the records and samples each lost (the goal
// is none), and the kernel memory of our rings.
//
//	go test -run '^$' -bench LostSmallTargets -count 5 ./capture
func BenchmarkLostSmallTargets(b *testing.B) {
	testutil.RequirePerf(b)
	perf := testutil.RequireTool(b, "perf")
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"python3.11", []string{"/usr/bin/python3"}},
		{"python3.12-X-perf", []string{"/root/.pyenv/versions/3.12.1/bin/python3", "-X", "perf"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			py := testutil.RequireTool(b, tc.args[0])
			tg := testutil.Start(b, py, append(tc.args[1:], testutil.Testdata(b, "python", "work.py"))...)
			tg.WaitLine(b, "ready", 30*time.Second)
			host := testutil.WatchHost(tg.Pid)
			var lost, perfLost, samples, perfSamples float64
			n := 0
			for b.Loop() {
				data := filepath.Join(b.TempDir(), "perf.data")
				pr := exec.Command(perf, "record", "-q", "-g", "-o", data, "-p", strconv.Itoa(tg.Pid), "--", "sleep", "4")
				if err := pr.Start(); err != nil {
					b.Fatal(err)
				}
				res, err := Record(context.Background(), Config{PID: tg.Pid, Out: b.TempDir()}, 4*time.Second, nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := pr.Wait(); err != nil {
					b.Fatalf("perf record: %v", err)
				}
				c := res.Info.Counts
				lost += float64(c.Lost + c.LostSamples)
				samples += float64(c.Samples + c.OffCPU)
				pl, ps := perfLostEvents(b, data)
				perfLost += pl
				perfSamples += ps
				n++
			}
			b.ReportMetric(lost/float64(n), "lost-records")
			b.ReportMetric(samples/float64(n), "samples+intervals")
			b.ReportMetric(perfLost/float64(n), "perf-lost-records")
			b.ReportMetric(perfSamples/float64(n), "perf-samples")
			host.Stop().Report(b)
			b.ReportMetric(0, "ns/op")
		})
	}
}

// perfLostEvents reads what a perf recording lost (records and samples
// the kernel said it dropped) and its samples.
func perfLostEvents(b *testing.B, data string) (lost, samples float64) {
	info, err := testutil.ScanPerfData(data, func(*testutil.PerfDataSample) { samples++ })
	if err != nil {
		b.Fatal(err)
	}
	return float64(info.LostRecords + info.LostSamples), samples
}
