package model

import "time"

// KernelContext is the process's kernel context over a window, as package
// internal/kernelctx reads it (capture.json "kernel_context"): why its threads did
// not run — its cgroup's CPU quota, the host's steal, memory and I/O
// pressure — and what its memory and disks did.
type KernelContext struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Duration is the wall time between the readings (CLOCK_MONOTONIC).
	Duration time.Duration `json:"duration_ns"`
	// Cgroups are the process's cgroups at the end, one per hierarchy.
	Cgroups []Cgroup `json:"cgroups,omitempty"`
	// Throttling is the CPU bandwidth of the process's cgroup (Own) and
	// of every cgroup above it that sets a quota, innermost first.
	Throttling []Throttling `json:"throttling,omitempty"`
	// Pressure is PSI over the window: the host's, then the cgroup's
	// (v2).
	Pressure []Pressure `json:"pressure,omitempty"`
	// Host is how the host's CPUs spent the window.
	Host HostCPU `json:"host_cpu"`
	// OOMKills counts the host's OOM kills in the window (/proc/vmstat).
	OOMKills uint64 `json:"oom_kills"`
	// Reclaim is the host's direct reclaim, compaction, swap-ins and
	// major faults in the window.
	Reclaim Reclaim `json:"reclaim"`
	// Disks are the block devices that did I/O in the window, busiest
	// first.
	Disks []Disk `json:"disks,omitempty"`
	// Memory is the process's memory cgroup (Own) and every cgroup above
	// it that sets a limit.
	Memory []MemoryCgroup `json:"memory,omitempty"`
	// Threads are the threads whose faults or switches moved, busiest
	// (most major faults, then involuntary switches) first.
	Threads []ThreadCounts `json:"threads,omitempty"`
	// Notes say what could not be read or compared, and why.
	Notes []string `json:"notes,omitempty"`
}

// Cgroup names a cgroup: the hierarchy ("cpu,cpuacct", "memory";
// "" for the unified v2 hierarchy) and the path in it.
type Cgroup struct {
	Hierarchy string `json:"hierarchy"`
	Path      string `json:"path"`
}

// Throttling is a cgroup's CPU bandwidth enforcement over the window.
type Throttling struct {
	Path string `json:"path"`
	V2   bool   `json:"v2,omitempty"`
	// Own is the process's own cgroup; else a cgroup above it.
	Own bool `json:"own,omitempty"`
	// Quota and Period: the cgroup may use Quota of CPU time every
	// Period (at the end of the window); Limited is false without one.
	Limited bool          `json:"limited"`
	Quota   time.Duration `json:"quota_ns,omitempty"`
	Period  time.Duration `json:"period_ns,omitempty"`
	// Periods elapsed with runnable tasks; Throttled of them ended with
	// the quota used up and the group stopped until the next period;
	// ThrottledTime is how long its run queues were held (summed over
	// CPUs).
	Periods       uint64        `json:"periods"`
	Throttled     uint64        `json:"throttled_periods"`
	ThrottledTime time.Duration `json:"throttled_ns"`
	// Usage is the cgroup's CPU time in the window where the kernel
	// counts it in cpu.stat (v2), else zero.
	Usage time.Duration `json:"usage_ns,omitempty"`
}

// Share is the share of the window's periods in which the group was
// throttled.
func (t Throttling) Share() float64 {
	if t.Periods == 0 {
		return 0
	}
	return float64(t.Throttled) / float64(t.Periods)
}

// Pressure is one resource's PSI over the window.
type Pressure struct {
	// Scope is "host", or the v2 cgroup's path.
	Scope    string `json:"scope"`
	Resource string `json:"resource"` // "cpu", "memory", "io"
	// Some and Full are the stall time in the window (the delta of
	// total=) and the kernel's averages at its end; Full is nil where
	// the kernel has no "full" line.
	Some PressureStall  `json:"some"`
	Full *PressureStall `json:"full,omitempty"`
}

// PressureStall is a PSI line over a window.
type PressureStall struct {
	// Stalled is how long tasks were stalled during the window.
	Stalled time.Duration `json:"stalled_ns"`
	// Share is Stalled over the window's duration.
	Share float64 `json:"share"`
	// Avg10 and Avg60 are the kernel's running averages (in %) at the
	// window's end.
	Avg10 float64 `json:"avg10"`
	Avg60 float64 `json:"avg60"`
}

// HostCPU is the host's CPU time over the window, as shares of all of it
// (every CPU's ticks).
type HostCPU struct {
	CPUs int `json:"cpus"`
	// Steal is time the hypervisor ran something else on our virtual
	// CPUs; IOWait idle time with I/O outstanding; Busy user, system,
	// interrupts.
	Steal  float64 `json:"steal"`
	IOWait float64 `json:"iowait"`
	Busy   float64 `json:"busy"`
	// Ticks is how many USER_HZ ticks the shares are of.
	Ticks uint64 `json:"ticks"`
}

// Reclaim is the host's memory reclaim over the window (/proc/vmstat).
type Reclaim struct {
	AllocStalls   uint64 `json:"alloc_stalls"`
	ScanDirect    uint64 `json:"scan_direct"`
	StealDirect   uint64 `json:"steal_direct"`
	CompactStalls uint64 `json:"compact_stalls"`
	SwapIns       uint64 `json:"swap_ins"`
	MajorFaults   uint64 `json:"major_faults"`
	RefaultFile   uint64 `json:"refault_file"`
	RefaultAnon   uint64 `json:"refault_anon"`
}

// Any reports whether anything was reclaimed or read back.
func (r Reclaim) Any() bool { return r != Reclaim{} }

// MemoryCgroup is a memory cgroup over the window.
type MemoryCgroup struct {
	Path string `json:"path"`
	V2   bool   `json:"v2,omitempty"`
	Own  bool   `json:"own,omitempty"`
	// Limit (when Limited), High (when HighSet) and Usage at the end of
	// the window, in bytes.
	Limit    uint64 `json:"limit_bytes,omitempty"`
	Limited  bool   `json:"limited"`
	High     uint64 `json:"high_bytes,omitempty"`
	HighSet  bool   `json:"high_set,omitempty"`
	Usage    uint64 `json:"usage_bytes"`
	UnderOOM bool   `json:"under_oom,omitempty"`
	// Deltas over the window: charges that hit the limit (v1), OOM
	// kills, charges over memory.max and memory.high (v2), major faults,
	// pages direct reclaim scanned and reclaimed (v2).
	Failcnt     uint64 `json:"failcnt"`
	OOMKills    uint64 `json:"oom_kills"`
	MaxEvents   uint64 `json:"max_events"`
	HighEvents  uint64 `json:"high_events"`
	MajorFaults uint64 `json:"major_faults"`
	ScanDirect  uint64 `json:"scan_direct"`
	StealDirect uint64 `json:"steal_direct"`
}

// Disk is a block device's I/O over the window.
type Disk struct {
	Name string `json:"name"`
	// Major and Minor are its device number, what a file's st_dev names.
	Major uint32 `json:"major"`
	Minor uint32 `json:"minor"`
	// Busy is the share of the window it had I/O in flight.
	Busy       float64 `json:"busy"`
	Reads      uint64  `json:"reads"`
	Writes     uint64  `json:"writes"`
	ReadBytes  uint64  `json:"read_bytes"`
	WriteBytes uint64  `json:"write_bytes"`
	// Wait is the average time an I/O took (queue and service), when any
	// completed.
	Wait time.Duration `json:"wait_ns,omitempty"`
}

// ThreadCounts is one thread's counters over the window.
type ThreadCounts struct {
	TID         int    `json:"tid"`
	MajorFaults uint64 `json:"major_faults"`
	MinorFaults uint64 `json:"minor_faults"`
	Voluntary   uint64 `json:"voluntary_switches"`
	Involuntary uint64 `json:"involuntary_switches"`
}
