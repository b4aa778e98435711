package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// BenchmarkWatchIdle measures a real `stallwatch watch` process watching a
// healthy target that beats a heartbeat file once a second: the CPU it
// uses (percent of one core) and its resident memory, from the moment it
// is watching to the end of the run; the peak since start (reading the
// target's symbols) is reported apart. The budgets, over 60 s: 0.1% of a
// core and 25 MB with baseline sampling off; 1% of a core and 30 MB with
// 49 Hz baseline sampling of a target with 8 worker threads (busy half the
// time). STALLWATCH_IDLE_BENCH sets the run's length (default
// 10s; the figures are rates, so a shorter run reports the same ratio,
// only noisier).
func BenchmarkWatchIdle(b *testing.B) {
	d := 10 * time.Second
	if v, err := time.ParseDuration(os.Getenv("STALLWATCH_IDLE_BENCH")); err == nil && v > 0 {
		d = v
	}
	for _, bc := range []struct {
		name     string
		baseline string
		threads  string // worker threads of the target, beyond Go's own
		budget   float64
		rssMB    float64 // RSS budget
	}{
		{"baseline-off", "0", "0", 0.1, 25},
		{"baseline-49Hz-8-threads", "49", "8", 1, 30},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.baseline != "0" {
				testutil.RequirePerf(b)
			}
			var cpu, rss, hwm float64
			n := 0
			host := testutil.WatchHost()
			for b.Loop() {
				c, r, h := idleRun(b, d, bc.baseline, bc.threads)
				cpu, rss, hwm = cpu+c, rss+r, hwm+h
				n++
			}
			cpu, rss, hwm = cpu/float64(n), rss/float64(n), hwm/float64(n)
			b.ReportMetric(cpu, "cpu-%")
			b.ReportMetric(cpu/bc.budget, "cpu-of-budget")
			b.ReportMetric(rss, "rss-MB")
			b.ReportMetric(rss/bc.rssMB, "rss-of-budget")
			b.ReportMetric(hwm, "peak-rss-MB")
			host.Stop().Report(b)
			b.ReportMetric(0, "ns/op")
		})
	}
}

// idleRun watches a beater for d and returns stallwatch's CPU use in
// percent of a core, its largest RSS during the run and its peak RSS since
// it started, in MB.
func idleRun(b *testing.B, d time.Duration, baseline, threads string) (cpuPct, rssMB, hwmMB float64) {
	dir := b.TempDir()
	beat := filepath.Join(dir, "beat")
	target := testutil.Start(b, beaterBin.build(b, "beater", testutil.Testdata(b, "beater")), "-file", beat, "-interval", "1s", "-threads", threads)
	target.WaitLine(b, "ready", 10*time.Second)
	sw := testutil.Start(b, watchBin.build(b, "stallwatch", "."), "watch", "--pid", strconv.Itoa(target.Pid),
		"--heartbeat-file", beat, "--baseline-freq", baseline, "--out", filepath.Join(dir, "out"))
	if err := testutil.Eventually(30*time.Second, func() bool { return strings.Contains(sw.Stderr(), "heartbeat healthy") }); err != nil {
		b.Fatalf("stallwatch never saw a beat; log:\n%s", sw.Stderr())
	}
	pid := sw.Cmd.Process.Pid
	start, t0 := cpuNanos(b, pid), time.Now()
	// RSS over the run: the largest of one reading a second (the peak
	// since start, VmHWM, includes reading the target's symbols).
	for time.Since(t0) < d {
		time.Sleep(min(time.Second, d-time.Since(t0)))
		r, _ := memMB(b, pid)
		rssMB = max(rssMB, r)
	}
	used, elapsed := cpuNanos(b, pid)-start, time.Since(t0)
	_, hwmMB = memMB(b, pid)
	if strings.Contains(sw.Stderr(), "stalled") {
		b.Errorf("a healthy target was reported stalled; log:\n%s", sw.Stderr())
	}
	_ = sw.Cmd.Process.Signal(syscall.SIGTERM)
	<-sw.Done()
	return 100 * float64(used) / float64(elapsed), rssMB, hwmMB
}

// cpuNanos sums the time on CPU of every thread of pid (schedstat, in ns).
func cpuNanos(b *testing.B, pid int) uint64 {
	tids, err := procfs.Threads(pid)
	if err != nil {
		b.Fatal(err)
	}
	var sum uint64
	for _, tid := range tids {
		if ss, err := procfs.ReadSchedstat(pid, tid); err == nil {
			sum += ss.RunNanos
		}
	}
	return sum
}

// memMB reads VmRSS and VmHWM of pid, in MB.
func memMB(b *testing.B, pid int) (rss, hwm float64) {
	st, err := os.ReadFile(procfs.PidPath(pid, "status"))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range bytes.Split(st, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		f := strings.Fields(string(v))
		if len(f) != 2 || f[1] != "kB" {
			continue
		}
		kb, _ := strconv.ParseFloat(f[0], 64)
		switch string(k) {
		case "VmRSS":
			rss = kb / 1024
		case "VmHWM":
			hwm = kb / 1024
		}
	}
	return rss, hwm
}
