package kernelctx

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// maxKeyedLines bounds the lines of a flat-keyed file read (/proc/vmstat
// has about 200, memory.stat about 70).
const maxKeyedLines = 4096

// eachKeyed calls f for every "key value" line of a flat-keyed file
// (cgroup-v2.rst "Interface Files": cpu.stat, memory.events,
// memory.stat; and /proc/vmstat, v1's cpu.stat and memory.oom_control).
// Lines whose value is not an unsigned number are skipped.
func eachKeyed(b []byte, f func(key []byte, v uint64)) {
	for n := 0; len(b) > 0 && n < maxKeyedLines; n++ {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		k, v, ok := bytes.Cut(line, []byte{' '})
		if !ok || len(k) == 0 {
			continue
		}
		x, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			continue
		}
		f(k, x)
	}
}

// CPUStat is a cgroup's cpu.stat: what the CPU bandwidth controller
// counted since the cgroup was made.
type CPUStat struct {
	// Usage is the CPU time its tasks used (v2 usage_usec; v1 keeps it
	// in cpuacct.usage, not here: zero).
	Usage time.Duration
	// Bandwidth is set when the file has the bandwidth counters (v1
	// always; v2 when the cpu controller is enabled for the cgroup).
	Bandwidth bool
	// Periods is how many enforcement periods have elapsed with tasks
	// runnable, Throttled in how many of them the group used its quota
	// up and was stopped, ThrottledTime for how long its run queues were
	// held (summed over CPUs).
	Periods, Throttled uint64
	ThrottledTime      time.Duration
	// Bursts and BurstTime count periods that ran into the burst
	// allowance (cpu.max.burst, cpu.cfs_burst_us).
	Bursts    uint64
	BurstTime time.Duration
}

// ParseCPUStat parses cpu.stat of either version: v1 counts times in
// nanoseconds (throttled_time, burst_time), v2 in microseconds
// (throttled_usec, burst_usec, usage_usec).
func ParseCPUStat(b []byte) CPUStat {
	var s CPUStat
	eachKeyed(b, func(k []byte, v uint64) {
		switch string(k) {
		case "usage_usec":
			s.Usage = usec(v)
		case "nr_periods":
			s.Periods, s.Bandwidth = v, true
		case "nr_throttled":
			s.Throttled = v
		case "throttled_time":
			s.ThrottledTime = nsec(v)
		case "throttled_usec":
			s.ThrottledTime = usec(v)
		case "nr_bursts":
			s.Bursts = v
		case "burst_time":
			s.BurstTime = nsec(v)
		case "burst_usec":
			s.BurstTime = usec(v)
		}
	})
	return s
}

// usec and nsec turn a counter into a Duration, saturating (a counter
// near 2^64 is garbage, never a negative duration).
func usec(v uint64) time.Duration {
	if v > math.MaxInt64/uint64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(v) * time.Microsecond
}

func nsec(v uint64) time.Duration {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(v)
}

// Quota is a cgroup's CPU bandwidth limit: at most Quota of CPU time in
// every Period. Limited is false when the cgroup sets none.
type Quota struct {
	Limited bool
	Quota   time.Duration
	Period  time.Duration
}

// CPUs is the limit in CPUs (Quota/Period): 0.5 is half a CPU.
func (q Quota) CPUs() float64 {
	if !q.Limited || q.Period <= 0 {
		return 0
	}
	return float64(q.Quota) / float64(q.Period)
}

// ParseCPUMax parses v2's cpu.max: "$MAX $PERIOD" in microseconds, $MAX
// "max" for no limit (cgroup-v2.rst; a third field, the burst of a
// proposed extension, is ignored).
func ParseCPUMax(b []byte) (Quota, error) {
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return Quota{}, fmt.Errorf("cpu.max %q: want \"$MAX $PERIOD\"", clip(b))
	}
	period, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil || period == 0 {
		return Quota{}, fmt.Errorf("cpu.max %q: bad period", clip(b))
	}
	q := Quota{Period: usec(period)}
	if f[0] == "max" {
		return q, nil
	}
	max, err := strconv.ParseUint(f[0], 10, 63)
	if err != nil {
		return Quota{}, fmt.Errorf("cpu.max %q: bad $MAX", clip(b))
	}
	q.Limited, q.Quota = true, usec(max)
	return q, nil
}

// ParseCFSQuota parses v1's cpu.cfs_quota_us and cpu.cfs_period_us
// (microseconds; a quota of -1 is no limit).
func ParseCFSQuota(quota, period []byte) (Quota, error) {
	p, err := strconv.ParseUint(strings.TrimSpace(string(period)), 10, 32)
	if err != nil || p == 0 {
		return Quota{}, fmt.Errorf("cpu.cfs_period_us %q: not a period", clip(period))
	}
	q := Quota{Period: usec(p)}
	v, err := strconv.ParseInt(strings.TrimSpace(string(quota)), 10, 64)
	switch {
	case err != nil:
		return Quota{}, fmt.Errorf("cpu.cfs_quota_us %q: not a number", clip(quota))
	case v < 0:
		return q, nil
	}
	q.Limited, q.Quota = true, usec(uint64(v))
	return q, nil
}

// Stall is one line of a PSI file: the share of time (in %, over the
// last 10, 60 and 300 seconds) in which tasks were stalled, and the
// total stall time since boot (psi.rst).
type Stall struct {
	Avg10, Avg60, Avg300 float64
	Total                time.Duration
}

// PSI is a pressure file: "some" (at least one task stalled) and "full"
// (all non-idle tasks stalled at once; on the CPU file of the whole host
// the kernel prints zeros, and kernels before 5.13 no line).
type PSI struct {
	Some    Stall
	Full    Stall
	HasFull bool
}

// errNoPSI is a pressure file without a "some" line.
var errNoPSI = errors.New("no \"some\" line")

// ParsePressure parses /proc/pressure/{cpu,memory,io} or a v2 cgroup's
// {cpu,memory,io}.pressure: "some avg10=0.00 avg60=0.00 avg300=0.00
// total=0", then a "full" line of the same form.
func ParsePressure(b []byte) (PSI, error) {
	var p PSI
	some := false
	for n := 0; len(b) > 0 && n < 8; n++ {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		kind, rest, _ := bytes.Cut(line, []byte{' '})
		var s *Stall
		switch string(kind) {
		case "some":
			s, some = &p.Some, true
		case "full":
			s, p.HasFull = &p.Full, true
		default:
			continue
		}
		if err := parseStall(rest, s); err != nil {
			return PSI{}, fmt.Errorf("%s line: %w", kind, err)
		}
	}
	if !some {
		return PSI{}, errNoPSI
	}
	return p, nil
}

func parseStall(b []byte, s *Stall) error {
	seen := 0
	for _, f := range bytes.Fields(b) {
		k, v, ok := bytes.Cut(f, []byte{'='})
		if !ok {
			continue
		}
		switch string(k) {
		case "avg10", "avg60", "avg300":
			x, err := strconv.ParseFloat(string(v), 64)
			if err != nil || x < 0 || x > 100 || math.IsNaN(x) {
				return fmt.Errorf("%s=%q: not a share in %%", k, clip(v))
			}
			switch string(k) {
			case "avg10":
				s.Avg10 = x
			case "avg60":
				s.Avg60 = x
			default:
				s.Avg300 = x
			}
		case "total":
			x, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return fmt.Errorf("total=%q: not a number of microseconds", clip(v))
			}
			s.Total = usec(x)
		default:
			continue
		}
		seen++
	}
	if seen < 4 {
		return fmt.Errorf("%d of avg10, avg60, avg300, total", seen)
	}
	return nil
}

// CPUTimes is the "cpu" line of /proc/stat: the whole host's CPU time
// since boot by what it was spent on, in USER_HZ ticks (proc.rst 1.7;
// guest time is counted in User and Nice as well, so it is not added).
type CPUTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
	// CPUs counts the "cpuN" lines: the CPUs online.
	CPUs int
}

// Stolen is the Steal ticks as time: the hypervisor ran something else
// while these CPUs had work. USER_HZ is 100 on every architecture Go
// runs Linux on. perf's cpu-clock runs on through it, the scheduler's
// run time (schedstat) does not: a thread sampled at F Hz while it used
// d of CPU time gets up to F × (d + steal) samples.
func (c CPUTimes) Stolen() time.Duration { return time.Duration(c.Steal) * 10 * time.Millisecond }

// Total is every tick counted (saturating: garbage never wraps).
func (c CPUTimes) Total() uint64 {
	var t uint64
	for _, v := range [...]uint64{c.User, c.Nice, c.System, c.Idle, c.IOWait, c.IRQ, c.SoftIRQ, c.Steal} {
		if t+v < t {
			return math.MaxUint64
		}
		t += v
	}
	return t
}

// ParseProcStat parses the CPU lines of /proc/stat.
func ParseProcStat(b []byte) (CPUTimes, error) {
	var c CPUTimes
	found := false
	for n := 0; len(b) > 0 && n < 1<<16; n++ {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		name, rest, _ := bytes.Cut(line, []byte{' '})
		switch {
		case string(name) == "cpu":
			f := bytes.Fields(rest)
			if len(f) < 8 {
				return CPUTimes{}, fmt.Errorf("/proc/stat cpu line: %d fields, want at least 8", len(f))
			}
			for i, dst := range []*uint64{&c.User, &c.Nice, &c.System, &c.Idle, &c.IOWait, &c.IRQ, &c.SoftIRQ, &c.Steal} {
				v, err := strconv.ParseUint(string(f[i]), 10, 64)
				if err != nil {
					return CPUTimes{}, fmt.Errorf("/proc/stat cpu line: field %d %q: not a number", i+1, clip(f[i]))
				}
				*dst = v
			}
			found = true
		case bytes.HasPrefix(name, []byte("cpu")):
			if _, err := strconv.Atoi(string(name[3:])); err == nil {
				c.CPUs++
			}
		}
	}
	if !found {
		return CPUTimes{}, errors.New("/proc/stat: no cpu line")
	}
	return c, nil
}

// VMStat is what /proc/vmstat counts since boot that says why memory
// stalled: OOM kills, direct reclaim, compaction, swap-ins, major faults
// and refaults (pages read back soon after they were reclaimed).
type VMStat struct {
	OOMKills uint64
	// AllocStalls counts allocations that entered direct reclaim
	// (allocstall_* of every zone, or allocstall before Linux 4.10).
	AllocStalls uint64
	// ScanDirect and StealDirect are the pages direct reclaim scanned
	// and reclaimed (memory cgroup limit reclaim is counted in the
	// cgroup's memory.stat instead).
	ScanDirect, StealDirect  uint64
	CompactStalls            uint64
	SwapIns                  uint64
	MajorFaults              uint64
	RefaultFile, RefaultAnon uint64
}

// ParseVMStat parses /proc/vmstat.
func ParseVMStat(b []byte) VMStat {
	var s VMStat
	var old, zones uint64
	perZone := false
	eachKeyed(b, func(k []byte, v uint64) {
		switch key := string(k); {
		case key == "oom_kill":
			s.OOMKills = v
		case key == "allocstall":
			old = v
		case strings.HasPrefix(key, "allocstall_"):
			zones += v
			perZone = true
		case key == "pgscan_direct":
			s.ScanDirect = v
		case key == "pgsteal_direct":
			s.StealDirect = v
		case key == "compact_stall":
			s.CompactStalls = v
		case key == "pswpin":
			s.SwapIns = v
		case key == "pgmajfault":
			s.MajorFaults = v
		case key == "workingset_refault_file", key == "workingset_refault":
			s.RefaultFile = v
		case key == "workingset_refault_anon":
			s.RefaultAnon = v
		}
	})
	s.AllocStalls = old
	if perZone {
		s.AllocStalls = zones
	}
	return s
}

// clip shortens what an error quotes of a file.
func clip(b []byte) string {
	const max = 40
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// DiskStat is one line of /proc/diskstats (Documentation/admin-guide/
// iostats.rst): a block device's I/O since boot.
type DiskStat struct {
	Major, Minor uint32
	Name         string
	Reads        uint64 // reads completed
	SectorsRead  uint64 // 512-byte sectors
	Writes       uint64
	SectorsWrite uint64
	InFlight     uint64 // I/Os in progress now
	// IOTicks is the time the device had I/O in flight (its busy time);
	// QueueTime the time every I/O spent, summed (both ms in the file).
	IOTicks, QueueTime time.Duration
}

// maxDisks bounds the devices read.
const maxDisks = 4096

// ParseDiskstats parses /proc/diskstats; malformed lines are skipped.
func ParseDiskstats(b []byte) []DiskStat {
	var out []DiskStat
	for len(b) > 0 && len(out) < maxDisks {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		f := bytes.Fields(line)
		if len(f) < 14 {
			continue
		}
		var v [14]uint64
		ok := true
		for i := range v {
			if i == 2 {
				continue
			}
			x, err := strconv.ParseUint(string(f[i]), 10, 64)
			if err != nil {
				ok = false
				break
			}
			v[i] = x
		}
		if !ok || v[0] > math.MaxUint32 || v[1] > math.MaxUint32 {
			continue
		}
		out = append(out, DiskStat{
			Major: uint32(v[0]), Minor: uint32(v[1]), Name: string(f[2]),
			Reads: v[3], SectorsRead: v[5], Writes: v[7], SectorsWrite: v[9], InFlight: v[11],
			IOTicks: msec(v[12]), QueueTime: msec(v[13]),
		})
	}
	return out
}

func msec(v uint64) time.Duration {
	if v > math.MaxInt64/uint64(time.Millisecond) {
		return math.MaxInt64
	}
	return time.Duration(v) * time.Millisecond
}
