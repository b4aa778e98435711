package testutil

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// HostWatch measures what the rest of the host did while a benchmark ran:
// on a machine others share, a figure means little without the load it
// was measured under. Start it before the measured stretch and read it
// after; the figures go beside the benchmark's own (Report).
type HostWatch struct {
	t0     time.Time
	load0  float64
	busy0  uint64        // host CPU ticks not idle, from /proc/stat
	self0  time.Duration // this process and its waited-for children
	pids   []int         // other processes of the benchmark (targets)
	pidCPU time.Duration // their CPU at the start
}

// HostLoad is what a HostWatch saw.
type HostLoad struct {
	// Load is the 1-minute load average, the mean of its readings at the
	// start and at the end.
	Load float64
	// Others is the CPU the host's other processes used, in cores (2 is
	// both cores of a 2-core machine kept busy): the host's busy time
	// less this process's, its children's and the pids' it was given.
	Others float64
	Cores  int
	Window time.Duration
}

// WatchHost starts measuring the host. pids are processes the benchmark
// runs (its targets), whose CPU is not counted as others'.
func WatchHost(pids ...int) *HostWatch {
	h := &HostWatch{t0: time.Now(), load0: loadAvg(), busy0: hostBusyTicks(), self0: ownCPU(), pids: pids}
	h.pidCPU = pidsCPU(pids)
	return h
}

// Stop reads what the host did since WatchHost.
func (h *HostWatch) Stop() HostLoad {
	busy := hostBusyTicks() - h.busy0
	ours := ownCPU() - h.self0 + pidsCPU(h.pids) - h.pidCPU
	window := time.Since(h.t0)
	others := time.Duration(busy)*time.Second/clockTicks - ours
	return HostLoad{
		Load:   (h.load0 + loadAvg()) / 2,
		Others: max(0, others.Seconds()/window.Seconds()),
		Cores:  runtime.NumCPU(),
		Window: window,
	}
}

// Report adds the load to b's metrics: host-load (the load average),
// host-others-cores (what other processes ran, in cores) and host-cores.
func (l HostLoad) Report(b *testing.B) {
	b.ReportMetric(l.Load, "host-load")
	b.ReportMetric(l.Others, "host-others-cores")
	b.ReportMetric(float64(l.Cores), "host-cores")
}

func (l HostLoad) String() string {
	return fmt.Sprintf("load average %.1f, other processes %.2f of %d cores over %v", l.Load, l.Others, l.Cores, l.Window.Round(time.Millisecond))
}

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// hostBusyTicks is the host's CPU time not idle since boot (/proc/stat's
// cpu line: user, nice, system, irq, softirq, steal; idle and iowait
// left out; guest time is inside user already).
func hostBusyTicks() uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := bytes.Fields(line)
	if len(f) < 9 || string(f[0]) != "cpu" {
		return 0
	}
	var sum uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system (idle iowait) irq softirq steal
		v, _ := strconv.ParseUint(string(f[i]), 10, 64)
		sum += v
	}
	return sum
}

// loadAvg is the 1-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(string(f[0]), 64)
	return v
}

// ownCPU is the CPU this process and its waited-for children used.
func ownCPU() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	return time.Duration(self.Utime.Nano() + self.Stime.Nano() + kids.Utime.Nano() + kids.Stime.Nano())
}

func pidsCPU(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		c, _ := CPUTime(pid)
		sum += c
	}
	return sum
}
