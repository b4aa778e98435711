package main

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// BenchmarkDaemon: an idle daemon watching 200 processes by their
// progress and 50 by the DogStatsD tap (the tickers wake every 100 ms;
// the 50 send a datagram each time). It reports the daemon's CPU over 20 s
// as a share of one core and its RSS (goals: < 0.5% and < 60 MB), the time
// from a process starting to its being watched (exec events, and a /proc
// scan), and from a stall's deadline to its capture being written with
// 250 processes watched.
func BenchmarkDaemon(b *testing.B) {
	testutil.RequireRoot(b)
	testutil.RequirePerf(b)
	ticker := testutil.BuildC(b, "ticker/ticker.c")
	tag := marker()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port)
	c.Close()
	var procs []*testutil.Target
	for i := range 250 {
		args := []string{"p-" + tag}
		if i >= 200 {
			args = []string{"t-" + tag, port}
		}
		tg := testutil.Start(b, ticker, args...)
		tg.WaitLine(b, "ready", 30*time.Second)
		procs = append(procs, tg)
	}
	// Both rules keep the default stall-after (10 s), as a rule that
	// does not set it has: the progress rule then reads each target every
	// second (watchdog.PollInterval).
	const stallAfter = 10 * time.Second
	config := `
out: OUT
rules:
  - name: progress
    match: {cmdline: 'ticker p-` + tag + `'}
    heartbeat-proc: true
    capture-for: 1s
    max-captures: 1
  - name: tap
    match: {cmdline: 'ticker t-` + tag + `'}
    heartbeat-tap: udp://:` + port + `
    metric: bench.heartbeat
`
	for i := 0; i < b.N; i++ {
		for _, scanOnly := range []bool{false, true} {
			e := newDaemonEnv(b, config)
			var extra []string
			mode := "exec-events"
			if scanOnly {
				extra, mode = []string{"--scan-only"}, "scan-2s"
			}
			e.start(b, extra...)
			healthyAll := func() bool {
				n := 0
				for _, ts := range e.status(b).Targets {
					if ts.State == "healthy" {
						n++
					}
				}
				return n == len(procs)
			}
			if err := testutil.Eventually(2*time.Minute, healthyAll); err != nil {
				b.Fatalf("not all %d healthy", len(procs))
			}
			// A new process: from its start to its being watched.
			start := time.Now()
			late := testutil.Start(b, ticker, "p-"+tag)
			for e.target(b, late.Pid) == nil {
				time.Sleep(5 * time.Millisecond)
			}
			b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms-to-watched-"+mode)
			_ = late.Cmd.Process.Kill()
			if scanOnly {
				stopDaemon(b, e)
				continue
			}
			// Idle cost.
			// The daemon sees every exec on the host (its discovery), so
			// the processes others start meanwhile are part of its cost:
			// the host's forks are reported beside it. The goal is with
			// 50 a second: the benchmark starts them itself (forker),
			// on top of whatever others start.
			pids := []int{e.sw.Pid}
			for _, tg := range procs {
				pids = append(pids, tg.Pid)
			}
			for _, forks := range []int{0, 50} {
				suffix := ""
				if forks > 0 {
					suffix = "-" + strconv.Itoa(forks) + "-forks/s"
				}
				stop := forker(b, forks)
				host := testutil.WatchHost(pids...)
				cpu0, _ := testutil.CPUTime(e.sw.Pid)
				forks0 := hostForks()
				t0 := time.Now()
				time.Sleep(20 * time.Second) // the measurement window, not synchronization
				cpu1, _ := testutil.CPUTime(e.sw.Pid)
				window := time.Since(t0)
				started := stop()
				share := float64(cpu1-cpu0) / float64(window) * 100
				b.ReportMetric(float64(hostForks()-forks0)/window.Seconds(), "host-forks/s"+suffix)
				if forks > 0 {
					b.ReportMetric(float64(started)/window.Seconds(), "forker-execs/s")
				} else {
					host.Stop().Report(b)
				}
				rss := float64(rssKiB(e.sw.Pid)) / 1024
				b.ReportMetric(share, "%core-idle"+suffix)
				b.ReportMetric(rss, "MB-rss"+suffix)
				b.Logf("idle daemon, 200 progress + 50 tap targets, stall-after %v, %d execs/s of our own: %.2f%% of a core over %v (goal < 0.5%% at 50), RSS %.1f MB (goal < 60 MB)",
					stallAfter, forks, share, window.Round(time.Second), rss)
			}
			// A stall: from its deadline (SIGSTOP + stall-after) to its
			// capture written.
			victim := procs[0]
			stopped := time.Now()
			_ = syscall.Kill(victim.Pid, syscall.SIGSTOP)
			for {
				ts := e.target(b, victim.Pid)
				if ts != nil && ts.Captures == 1 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			b.ReportMetric(float64((time.Since(stopped) - stallAfter).Milliseconds()), "ms-stall-to-captured")
			_ = syscall.Kill(victim.Pid, syscall.SIGCONT)
			st := e.status(b)
			for _, tp := range st.Taps {
				b.ReportMetric(float64(tp.KernelDrops), "tap-drops")
			}
			stopDaemon(b, e)
		}
	}
}

// forker starts perSecond short-lived processes a second (fork and exec
// of true, as a shell script's commands are) until the returned function
// is called, which says how many it started.
func forker(b *testing.B, perSecond int) (stop func() int) {
	if perSecond == 0 {
		return func() int { return 0 }
	}
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan int)
	quit := make(chan struct{})
	go func() {
		n := 0
		tick := time.NewTicker(time.Second / time.Duration(perSecond))
		defer tick.Stop()
		for {
			select {
			case <-quit:
				done <- n
				return
			case <-tick.C:
				if exec.Command(truePath).Run() == nil {
					n++
				}
			}
		}
	}()
	return func() int { close(quit); return <-done }
}

func stopDaemon(b *testing.B, e *daemonEnv) {
	_ = e.sw.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.sw.Done():
	case <-time.After(30 * time.Second):
		b.Fatalf("the daemon did not stop")
	}
}

// hostForks is the number of processes and threads created since boot
// (/proc/stat's processes).
func hostForks() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "processes "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// rssKiB is a process's resident set (VmRSS).
func rssKiB(pid int) int {
	b, err := os.ReadFile(procfs.PidPath(pid, "status"))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return -1
}
