package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	reports "github.com/stallwatch/stallwatch/report"
)

// soakLength is how long BenchmarkContinuousSoak runs: STALLWATCH_SOAK
// (make soak: 10m), else 2m, so that make bench stays within its time.
func soakLength() time.Duration {
	if v, err := time.ParseDuration(os.Getenv("STALLWATCH_SOAK")); err == nil && v >= 2*time.Minute {
		return v
	}
	return 2 * time.Minute
}

// The soak's bounds: after the first minute (the JIT warm, the tables of
// node's libraries read, the first periods' buffers grown), stallwatch's
// descriptors grow by at most soakFDGrowth, however long it runs (more is
// a leak, and fails the benchmark); its Go heap live after a collection
// is reported against soakHeapGrowth (rss-of-bound: the goal, not yet
// met while the target compiles new code for ever, is 1 or less).
const (
	soakHeapGrowth = 4 << 20
	soakFDGrowth   = 2
)

// gcLine is a line of GODEBUG=gctrace=1: when, and the heap live after.
var gcLine = regexp.MustCompile(`(?m)^gc \d+ @([\d.]+)s .*?(\d+)->(\d+)->(\d+) MB`)

// liveHeap reads stallwatch's gctrace lines: the heap live after the
// last collection before at (since stallwatch started), and after the
// last of all, in MB (0 when none).
func liveHeap(log string, at time.Duration) (before, last float64) {
	for _, m := range gcLine.FindAllStringSubmatch(log, -1) {
		t, _ := strconv.ParseFloat(m[1], 64)
		live, _ := strconv.ParseFloat(m[4], 64)
		if time.Duration(t*float64(time.Second)) <= at {
			before = live
		}
		last = live
	}
	return before, last
}

// BenchmarkContinuousSoak is the accelerated soak of continuous
// profiling: `stallwatch watch --profile-period 1s` on a real Node.js
// --perf-prof target that keeps compiling new functions (ten a second,
// each run until V8 optimizes it and then dropped: its jitdump grows for
// the whole run, and V8's code space is reused), for STALLWATCH_SOAK
// (make soak: 10m; 2m by default). Every second it reads stallwatch's RSS
// and open descriptors; at the end it checks that after the first minute
// neither grew past its bound (soakRSSGrowth, soakFDGrowth), and that no
// period is missing: the files under OUT/profiles are contiguous (each
// one's end the next one's start) and as many as the run's seconds.
func BenchmarkContinuousSoak(b *testing.B) {
	testutil.RequirePerf(b)
	testutil.RequirePtrace(b)
	node := testutil.RequireTool(b, "node")
	d := soakLength()
	for b.Loop() {
		soak(b, node, d)
	}
	b.ReportMetric(0, "ns/op")
}

type soakReading struct {
	at  time.Duration
	rss float64 // MB
	fds int
}

func soak(b *testing.B, node string, d time.Duration) {
	dir := b.TempDir()
	cmd := exec.Command(node, "--perf-prof", testutil.Testdata(b, "node", "fib.js"), "22")
	cmd.Dir = dir
	compile, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	tg := testutil.StartCmd(b, cmd)
	tg.WaitLine(b, "ready", 30*time.Second)
	out := filepath.Join(dir, "out")
	swCmd := exec.Command(stallwatchBin(b), "watch", "--pid", strconv.Itoa(tg.Pid), "--heartbeat-proc", "--stall-after", "5m",
		"--baseline-freq", "0", "--profile-period", "1s", "--out", out, "--upload", "off", "--statsd", "off")
	swCmd.Env = append(os.Environ(), "GODEBUG=gctrace=1") // the live heap, on stderr
	sw := testutil.StartCmd(b, swCmd)
	swStart := time.Now()
	if err := testutil.Eventually(30*time.Second, func() bool { return strings.Contains(sw.Stderr(), "continuous profile on") }); err != nil {
		b.Fatalf("continuous profiling did not start; log:\n%s", sw.Stderr())
	}
	compiled := make(chan struct{}, 1024)
	go func() {
		for {
			line, err := tg.Stdout.ReadString('\n')
			if strings.HasPrefix(line, "compiled ") {
				select {
				case compiled <- struct{}{}:
				default:
				}
			}
			if err != nil {
				return
			}
		}
	}()
	host := testutil.WatchHost(tg.Pid)
	pid := sw.Cmd.Process.Pid
	cpu0 := cpuNanos(b, pid)
	t0 := time.Now()
	var readings []soakReading
	next, n, done := t0, 0, 0
	for time.Since(t0) < d {
		// Ten new functions a second, each a new CODE_LOAD or more.
		if _, err := fmt.Fprintf(compile, "compile soak%d\n", n); err != nil {
			b.Fatalf("the target stopped reading: %v", err)
		}
		n++
		time.Sleep(100 * time.Millisecond)
	drain:
		for {
			select {
			case <-compiled:
				done++
			default:
				break drain
			}
		}
		if time.Since(next) >= 0 {
			rss, _ := memMB(b, pid)
			fds := countFDs(b, pid)
			readings = append(readings, soakReading{time.Since(t0), rss, fds})
			next = next.Add(time.Second)
		}
	}
	elapsed := time.Since(t0)
	used := time.Duration(cpuNanos(b, pid) - cpu0)
	load := host.Stop()
	dumps, _ := filepath.Glob(filepath.Join(dir, "jit-*.dump"))
	var dumpBytes int64
	for _, f := range dumps {
		if st, err := os.Stat(f); err == nil {
			dumpBytes += st.Size()
		}
	}
	_ = sw.Cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-sw.Done():
	case <-time.After(30 * time.Second):
		b.Fatalf("stallwatch did not exit after SIGINT; log:\n%s", sw.Stderr())
	}

	// Flat after the first minute.
	var at1m soakReading
	var maxRSS float64
	maxFDs := 0
	for _, r := range readings {
		if r.at < time.Minute {
			at1m = r
			continue
		}
		maxRSS, maxFDs = max(maxRSS, r.rss), max(maxFDs, r.fds)
	}
	last := readings[len(readings)-1]
	heap1m, heapEnd := liveHeap(sw.Stderr(), t0.Sub(swStart)+time.Minute)
	if maxFDs > at1m.fds+soakFDGrowth {
		b.Errorf("%d descriptors at 1m, up to %d after (bound +%d)", at1m.fds, maxFDs, soakFDGrowth)
	}
	periods, gaps := checkPeriods(b, filepath.Join(out, "profiles", strconv.Itoa(tg.Pid)+"-node"))
	// The periods run from stallwatch's start to its stop: the run's
	// length, plus what came before t0 and after it.
	if want := int(elapsed / time.Second); periods < want || gaps > 0 {
		b.Errorf("%d periods over %v (want %d at least), %d gaps", periods, elapsed.Round(time.Second), want, gaps)
	}
	b.Logf("%v: %d periods, %d gaps; %d functions compiled (%d asked), jitdump %.1f MB; RSS %.1f MB at 1m, %.1f MB at most after, %.1f MB at the end; Go heap live %.0f MB at 1m, %.0f MB at the end; descriptors %d at 1m, %d at most after; stallwatch %.2f%% of a core; %v",
		elapsed.Round(time.Second), periods, gaps, done, n, float64(dumpBytes)/1e6, at1m.rss, maxRSS, last.rss, heap1m, heapEnd, at1m.fds, maxFDs,
		100*used.Seconds()/elapsed.Seconds(), load)
	b.ReportMetric(heapEnd, "heap-MB-live-end")
	b.ReportMetric(heapEnd-heap1m, "heap-MB-growth")
	b.ReportMetric((heapEnd-heap1m)/(float64(soakHeapGrowth)/(1<<20)), "heap-growth-of-bound")
	if elapsed > time.Minute {
		after1m := float64(done) * (elapsed - time.Minute).Seconds() / elapsed.Seconds()
		b.ReportMetric((heapEnd-heap1m)*1000/after1m, "heap-KB-per-function")
	}
	b.ReportMetric(float64(periods), "periods")
	b.ReportMetric(float64(gaps), "gaps")
	b.ReportMetric(at1m.rss, "rss-MB-at-1m")
	b.ReportMetric(maxRSS, "rss-MB-max-after-1m")
	b.ReportMetric(maxRSS-at1m.rss, "rss-MB-growth")
	b.ReportMetric(float64(maxFDs-at1m.fds), "fds-growth")
	b.ReportMetric(float64(dumpBytes)/1e6, "jitdump-MB")
	b.ReportMetric(100*used.Seconds()/elapsed.Seconds(), "cpu-%")
	load.Report(b)
}

// checkPeriods reads every period file of one target's directory, in
// time order, and counts them and the gaps between them (a period whose
// start is not the end of the one before).
func checkPeriods(b *testing.B, dir string) (periods, gaps int) {
	files, err := filepath.Glob(filepath.Join(dir, "*.pb.gz"))
	if err != nil || len(files) == 0 {
		b.Fatalf("no periods under %s (%v)", dir, err)
	}
	slices.Sort(files) // START.pb.gz: UTC, fixed width
	var prevEnd int64
	for i, f := range files {
		p, err := reports.ReadProfile(context.Background(), f)
		if err != nil {
			b.Fatal(err)
		}
		if i > 0 && p.TimeNanos != prevEnd {
			gaps++
			b.Errorf("%s starts at %v, the period before ended at %v", filepath.Base(f), time.Unix(0, p.TimeNanos).UTC(), time.Unix(0, prevEnd).UTC())
		}
		prevEnd = p.TimeNanos + p.DurationNanos
	}
	return len(files), gaps
}

// countFDs counts the open descriptors of pid.
func countFDs(b *testing.B, pid int) int {
	fds, err := os.ReadDir(procfs.PidPath(pid, "fd"))
	if err != nil {
		b.Fatal(err)
	}
	return len(fds)
}

// BenchmarkContinuousCost: what continuous profiling at its default rate
// (97 Hz, whole stacks: --unwind auto, frame pointers and 256 bytes of
// stack for this Go target) costs a CPU-bound target with deep stacks
// (testdata/spin, 24 frames) on 1 and on 8 busy threads, beside `perf
// record -F 97 -g` and `perf record -F 97 --call-graph dwarf` (8 KiB
// stack copies) on the same target in the same run. Each tool's window
// is compared with the unsampled windows on either side of it (the
// host's load drifts): the target's slowdown is the loss of its work per
// CPU second; each tool's CPU is its own process's, in percent of one
// core. The goal: stallwatch's slowdown under 1% and below both perf's.
// STALLWATCH_COST_WINDOW sets each window (default 5s), and three rounds
// of windows make one run.
func BenchmarkContinuousCost(b *testing.B) {
	testutil.RequirePerf(b)
	testutil.RequirePtrace(b)
	perf := testutil.RequireTool(b, "perf")
	window := 5 * time.Second
	if v, err := time.ParseDuration(os.Getenv("STALLWATCH_COST_WINDOW")); err == nil && v >= time.Second {
		window = v
	}
	spin := testutil.BuildGo(b, "spin")
	for _, threads := range []int{1, 8} {
		b.Run(fmt.Sprintf("threads-%d", threads), func(b *testing.B) {
			tg := testutil.Start(b, spin, "-threads", strconv.Itoa(threads), "-depth", "24", "-report", "100ms")
			tg.WaitLine(b, "ready", 30*time.Second)
			m := testutil.MeterWork(tg)
			host := testutil.WatchHost(tg.Pid)
			var ours, gSlow, dSlow, oursCPU, gCPU, dCPU float64
			rounds := 0
			for b.Loop() {
				for range 3 {
					base := m.Rate(window)
					sw, swSlow := ourWindow(b, m, tg.Pid, window)
					mid := m.Rate(window)
					g, gs := perfWindow(b, m, perf, "-g", tg.Pid, window)
					mid2 := m.Rate(window)
					d, ds := perfWindow(b, m, perf, "--call-graph=dwarf", tg.Pid, window)
					after := m.Rate(window)
					ours += 1 - swSlow/((base+mid)/2)
					gSlow += 1 - gs/((mid+mid2)/2)
					dSlow += 1 - ds/((mid2+after)/2)
					oursCPU, gCPU, dCPU = oursCPU+sw, gCPU+g, dCPU+d
					rounds++
					b.Logf("work/cpu-s: none %.0f, stallwatch %.0f (its CPU %.2f%%), none %.0f, perf -g %.0f (%.2f%%), none %.0f, perf dwarf %.0f (%.2f%%), none %.0f",
						base, swSlow, 100*sw, mid, gs, 100*g, mid2, ds, 100*d, after)
				}
			}
			n := float64(rounds)
			b.ReportMetric(100*ours/n, "ours-slowdown-%")
			b.ReportMetric(100*gSlow/n, "perf-g-slowdown-%")
			b.ReportMetric(100*dSlow/n, "perf-dwarf-slowdown-%")
			b.ReportMetric(100*oursCPU/n, "ours-cpu-%")
			b.ReportMetric(100*gCPU/n, "perf-g-cpu-%")
			b.ReportMetric(100*dCPU/n, "perf-dwarf-cpu-%")
			host.Stop().Report(b)
			b.ReportMetric(0, "ns/op")
		})
	}
}

// ourWindow runs `stallwatch watch --profile-period 60s` on pid and
// measures, over window once it profiles, its CPU (a share of one core)
// and the target's work per CPU second.
func ourWindow(b *testing.B, m *testutil.WorkMeter, pid int, window time.Duration) (cpu, rate float64) {
	sw := testutil.Start(b, stallwatchBin(b), "watch", "--pid", strconv.Itoa(pid), "--heartbeat-proc", "--stall-after", "5m",
		"--baseline-freq", "0", "--profile-period", "60s", "--out", b.TempDir(), "--upload", "off", "--statsd", "off")
	if err := testutil.Eventually(30*time.Second, func() bool { return strings.Contains(sw.Stderr(), "heartbeat healthy") }); err != nil {
		b.Fatalf("stallwatch did not start; log:\n%s", sw.Stderr())
	}
	time.Sleep(500 * time.Millisecond) // past reading the target's tables
	c0, t0 := cpuNanos(b, sw.Cmd.Process.Pid), time.Now()
	rate = m.Rate(window)
	cpu = float64(cpuNanos(b, sw.Cmd.Process.Pid)-c0) / float64(time.Since(t0))
	_ = sw.Cmd.Process.Signal(syscall.SIGTERM)
	<-sw.Done()
	return cpu, rate
}

// perfWindow runs `perf record -F 97 CALLGRAPH -p pid` over a window and
// returns its CPU (a share of one core, start and end included, as a user
// running it pays them) and the target's work per CPU second meanwhile.
func perfWindow(b *testing.B, m *testutil.WorkMeter, perf, callGraph string, pid int, window time.Duration) (cpu, rate float64) {
	out := filepath.Join(b.TempDir(), "perf.data")
	cmd := exec.Command(perf, "record", "-F", "97", callGraph, "-p", strconv.Itoa(pid), "-o", out,
		"--", "sleep", fmt.Sprintf("%.3f", (window+time.Second).Seconds()))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // perf attaches
	rate = m.Rate(window)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("perf record: %v\n%s", err, stderr.String())
	}
	used := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return float64(used) / float64(time.Since(t0)), rate
}

// BenchmarkDaemonContinuous: a daemon profiling 50 processes
// continuously (testdata/ticker: each wakes every 100 ms, so with
// profile-offcpu each is 20 context switches a second to sample, besides
// its CPU), 10 s periods written under OUT/profiles. It measures the
// daemon's CPU (a share of one core) and RSS over 60 s, then starts it
// again with --profile-max-cpu at half of what it used and reports what
// it gave up first (its log's first "profiling less" step, a 30 s window
// later) and its CPU in the window after that step.
func BenchmarkDaemonContinuous(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequirePerf(b)
	ticker := testutil.BuildC(b, "ticker/ticker.c")
	tag := marker()
	var pids []int
	for range 50 {
		tg := testutil.Start(b, ticker, "c-"+tag)
		tg.WaitLine(b, "ready", 30*time.Second)
		pids = append(pids, tg.Pid)
	}
	config := `
out: OUT
rules:
  - name: profiled
    match: {cmdline: 'ticker c-` + tag + `'}
    heartbeat-proc: true
    baseline-freq: 0
    profile-period: 10s
    profile-offcpu: true
`
	for b.Loop() {
		e := newDaemonEnv(b, config)
		e.start(b, "--upload", "off", "--statsd", "off")
		waitProfiled(b, e, len(pids))
		host := testutil.WatchHost(pids...)
		share, rss, fds := daemonCost(b, e, 60*time.Second)
		load := host.Stop()
		periods, _ := filepath.Glob(filepath.Join(e.out, "profiles", "*", "*.pb.gz"))
		stopDaemon(b, e)
		b.ReportMetric(100*share, "cpu-%")
		b.ReportMetric(rss, "rss-MB")
		b.ReportMetric(float64(fds), "fds")
		load.Report(b)

		// Half the budget it needs.
		half := fmt.Sprintf("%.3f%%", 100*share/2)
		e2 := newDaemonEnv(b, config)
		e2.start(b, "--upload", "off", "--statsd", "off", "--profile-max-cpu", half)
		waitProfiled(b, e2, len(pids))
		var first string
		if err := testutil.Eventually(3*time.Minute, func() bool {
			m := profilingLess.FindStringSubmatch(e2.sw.Stderr())
			if m != nil {
				first = m[1]
			}
			return m != nil
		}); err != nil {
			b.Fatalf("the daemon did not profile less at --profile-max-cpu %s; log:\n%s", half, e2.sw.Stderr())
		}
		after, rssAfter, _ := daemonCost(b, e2, 30*time.Second)
		stopDaemon(b, e2)
		b.ReportMetric(100*after, "cpu-%-after-first-step")
		b.Logf("50 targets profiled continuously (97 Hz, off-CPU on, 10 s periods): daemon %.2f%% of a core, RSS %.1f MB, %d descriptors, %d periods written; %s. With --profile-max-cpu %s it first gave up %q: then %.2f%% of a core, RSS %.1f MB",
			100*share, rss, fds, len(periods), load, half, first, 100*after, rssAfter)
	}
	b.ReportMetric(0, "ns/op")
}

var profilingLess = regexp.MustCompile(`over the host's budget: profiling less \(([^)]*)\)`)

// waitProfiled waits until the daemon watches n targets, and a period of
// each is written.
func waitProfiled(b *testing.B, e *daemonEnv, n int) {
	if err := testutil.Eventually(2*time.Minute, func() bool {
		dirs, _ := filepath.Glob(filepath.Join(e.out, "profiles", "*"))
		return len(e.status(b).Targets) == n && len(dirs) == n
	}); err != nil {
		b.Fatalf("%d targets watched, want %d with a period written; log:\n%s", len(e.status(b).Targets), n, e.sw.Stderr())
	}
}

// daemonCost measures the daemon's CPU over d (a share of one core), and
// its RSS and descriptors at the end.
func daemonCost(b *testing.B, e *daemonEnv, d time.Duration) (share, rssMB float64, fds int) {
	pid := e.sw.Cmd.Process.Pid
	c0, t0 := cpuNanos(b, pid), time.Now()
	time.Sleep(d) // the measurement window, not synchronization
	share = float64(cpuNanos(b, pid)-c0) / float64(time.Since(t0))
	return share, float64(rssKiB(pid)) / 1024, countFDs(b, pid)
}
