package kernelctx

import (
	"fmt"
	"sort"
	"time"
)

// Window is what the kernel counted about a process and its host between
// two readings: why its threads did not run, and what they waited for.
type Window struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Duration is the wall time between the readings (CLOCK_MONOTONIC).
	Duration time.Duration `json:"duration_ns"`
	// Cgroups are the process's cgroups at the end, one per hierarchy.
	Cgroups []CgroupPath `json:"cgroups,omitempty"`
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
	Memory []Memory `json:"memory,omitempty"`
	// Threads are the threads whose faults or switches moved, busiest
	// (most major faults, then involuntary switches) first.
	Threads []ThreadDelta `json:"threads,omitempty"`
	// Notes say what could not be read or compared, and why.
	Notes []string `json:"notes,omitempty"`
}

// CgroupPath names a cgroup: the hierarchy ("cpu,cpuacct", "memory";
// "" for the unified v2 hierarchy) and the path in it.
type CgroupPath struct {
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
	Some StallDelta  `json:"some"`
	Full *StallDelta `json:"full,omitempty"`
}

// StallDelta is a PSI line over a window.
type StallDelta struct {
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

// Memory is a memory cgroup over the window.
type Memory struct {
	Path string
	V2   bool
	Own  bool
	// Limit (when Limited), High (when HighSet) and Usage at the end of
	// the window, in bytes.
	Limit    uint64
	Limited  bool
	High     uint64
	HighSet  bool
	Usage    uint64
	UnderOOM bool
	// Deltas over the window.
	Failcnt, OOMKills, MaxEvents, HighEvents uint64
	MajorFaults, ScanDirect, StealDirect     uint64
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

// maxWindowDisks bounds the devices a Window lists.
const maxWindowDisks = 16

// ThreadDelta is one thread's counters over the window.
type ThreadDelta struct {
	TID         int    `json:"tid"`
	MajorFaults uint64 `json:"major_faults"`
	MinorFaults uint64 `json:"minor_faults"`
	Voluntary   uint64 `json:"voluntary_switches"`
	Involuntary uint64 `json:"involuntary_switches"`
}

// maxWindowThreads bounds the threads a Window lists.
const maxWindowThreads = 4096

// Between compares two readings of the same process, a before b. A
// counter that went down (its cgroup was made anew) is left out with a
// note.
func Between(a, b *Reading) *Window {
	w := &Window{Start: a.Time, End: b.Time}
	if b.Mono > a.Mono {
		w.Duration = time.Duration(b.Mono - a.Mono)
	}
	for _, err := range append(append([]error(nil), a.Errs...), b.Errs...) {
		w.note("%v", err)
	}
	for _, m := range b.Cgroups {
		h := joinControllers(m.Controllers)
		w.Cgroups = append(w.Cgroups, CgroupPath{Hierarchy: h, Path: m.Path})
	}
	w.throttling(a, b)
	w.memory(a, b)
	w.pressure("host", a.Host, b.Host)
	if a.CgroupPath == b.CgroupPath && a.CgroupPath != "" {
		w.pressure(b.CgroupPath, a.Cgroup, b.Cgroup)
	}
	w.host(a.CPUTimes, b.CPUTimes)
	w.vm(a.VM, b.VM)
	w.disks(a.Disks, b.Disks)
	w.threads(a.Threads, b.Threads)
	return w
}

func (w *Window) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	for _, n := range w.Notes {
		if n == s {
			return
		}
	}
	w.Notes = append(w.Notes, s)
}

func joinControllers(cs []string) string {
	s := ""
	for i, c := range cs {
		if i > 0 {
			s += ","
		}
		s += c
	}
	return s
}

// delta is b-a, or false when the counter went down.
func delta(a, b uint64) (uint64, bool) {
	if b < a {
		return 0, false
	}
	return b - a, true
}

func (w *Window) throttling(a, b *Reading) {
	before := map[string]CPUGroup{}
	for _, g := range a.CPU {
		before[g.Dir.FS] = g
	}
	for i, g := range b.CPU {
		if i > 0 && !g.Quota.Limited {
			continue
		}
		old, ok := before[g.Dir.FS]
		if !ok {
			w.note("the cpu cgroup %s was not the process's at the window's start: its throttling is not compared", g.Dir.Path)
			continue
		}
		t := Throttling{Path: g.Dir.Path, V2: g.V2, Own: i == 0, Limited: g.Quota.Limited, Quota: g.Quota.Quota, Period: g.Quota.Period}
		var ok1, ok2, ok3 bool
		t.Periods, ok1 = delta(old.Stat.Periods, g.Stat.Periods)
		t.Throttled, ok2 = delta(old.Stat.Throttled, g.Stat.Throttled)
		var tt uint64
		tt, ok3 = delta(uint64(old.Stat.ThrottledTime), uint64(g.Stat.ThrottledTime))
		if !ok1 || !ok2 || !ok3 {
			w.note("the cpu cgroup %s's counters went down during the window (it was made anew): its throttling is not compared", g.Dir.Path)
			continue
		}
		t.ThrottledTime = time.Duration(tt)
		if u, ok := delta(uint64(old.Stat.Usage), uint64(g.Stat.Usage)); ok {
			t.Usage = time.Duration(u)
		}
		w.Throttling = append(w.Throttling, t)
	}
}

func (w *Window) memory(a, b *Reading) {
	before := map[string]MemGroup{}
	for _, g := range a.Memory {
		before[g.Dir.FS] = g
	}
	for i, g := range b.Memory {
		if i > 0 && !g.Mem.Limited && !g.Mem.HighSet {
			continue
		}
		old, ok := before[g.Dir.FS]
		if !ok {
			w.note("the memory cgroup %s was not the process's at the window's start: it is not compared", g.Dir.Path)
			continue
		}
		m := Memory{Path: g.Dir.Path, V2: g.V2, Own: i == 0, Limit: g.Mem.Limit, Limited: g.Mem.Limited,
			High: g.Mem.High, HighSet: g.Mem.HighSet, Usage: g.Mem.Usage, UnderOOM: g.Mem.UnderOOM}
		all := true
		for _, f := range []struct {
			dst  *uint64
			a, b uint64
		}{
			{&m.Failcnt, old.Mem.Failcnt, g.Mem.Failcnt},
			{&m.OOMKills, old.Mem.OOMKills, g.Mem.OOMKills},
			{&m.MaxEvents, old.Mem.MaxEvents, g.Mem.MaxEvents},
			{&m.HighEvents, old.Mem.HighEvents, g.Mem.HighEvents},
			{&m.MajorFaults, old.Mem.MajorFaults, g.Mem.MajorFaults},
			{&m.ScanDirect, old.Mem.ScanDirect, g.Mem.ScanDirect},
			{&m.StealDirect, old.Mem.StealDirect, g.Mem.StealDirect},
		} {
			var ok bool
			if *f.dst, ok = delta(f.a, f.b); !ok {
				all = false
			}
		}
		if !all {
			w.note("the memory cgroup %s's counters went down during the window (it was made anew): it is not compared", g.Dir.Path)
			continue
		}
		w.Memory = append(w.Memory, m)
	}
}

func (w *Window) pressure(scope string, a, b *Pressures) {
	if a == nil || b == nil {
		return
	}
	for _, r := range []struct {
		name string
		a, b PSI
	}{{"cpu", a.CPU, b.CPU}, {"memory", a.Memory, b.Memory}, {"io", a.IO, b.IO}} {
		p := Pressure{Scope: scope, Resource: r.name, Some: w.stall(r.a.Some, r.b.Some)}
		if r.b.HasFull && r.a.HasFull {
			full := w.stall(r.a.Full, r.b.Full)
			p.Full = &full
		}
		w.Pressure = append(w.Pressure, p)
	}
}

func (w *Window) stall(a, b Stall) StallDelta {
	s := StallDelta{Avg10: b.Avg10, Avg60: b.Avg60}
	if b.Total > a.Total {
		s.Stalled = b.Total - a.Total
	}
	if w.Duration > 0 {
		s.Share = min(1, float64(s.Stalled)/float64(w.Duration))
	}
	return s
}

func (w *Window) host(a, b CPUTimes) {
	total, ok := delta(a.Total(), b.Total())
	if !ok || total == 0 {
		return
	}
	share := func(x, y uint64) float64 {
		d, _ := delta(x, y)
		return min(1, float64(d)/float64(total))
	}
	w.Host = HostCPU{
		CPUs:   b.CPUs,
		Ticks:  total,
		Steal:  share(a.Steal, b.Steal),
		IOWait: share(a.IOWait, b.IOWait),
		Busy:   share(a.User+a.Nice+a.System+a.IRQ+a.SoftIRQ, b.User+b.Nice+b.System+b.IRQ+b.SoftIRQ),
	}
}

func (w *Window) vm(a, b VMStat) {
	d := func(x, y uint64) uint64 { v, _ := delta(x, y); return v }
	w.OOMKills = d(a.OOMKills, b.OOMKills)
	w.Reclaim = Reclaim{
		AllocStalls: d(a.AllocStalls, b.AllocStalls), ScanDirect: d(a.ScanDirect, b.ScanDirect),
		StealDirect: d(a.StealDirect, b.StealDirect), CompactStalls: d(a.CompactStalls, b.CompactStalls),
		SwapIns: d(a.SwapIns, b.SwapIns), MajorFaults: d(a.MajorFaults, b.MajorFaults),
		RefaultFile: d(a.RefaultFile, b.RefaultFile), RefaultAnon: d(a.RefaultAnon, b.RefaultAnon),
	}
}

// disks lists the devices that did I/O, busiest first.
func (w *Window) disks(a, b []DiskStat) {
	type dev struct{ major, minor uint32 }
	before := make(map[dev]DiskStat, len(a))
	for _, d := range a {
		before[dev{d.Major, d.Minor}] = d
	}
	for _, d := range b {
		old, ok := before[dev{d.Major, d.Minor}]
		if !ok || old.Name != d.Name {
			continue
		}
		var x Disk
		var ok1, ok2, ok3, ok4 bool
		x.Reads, ok1 = delta(old.Reads, d.Reads)
		x.Writes, ok2 = delta(old.Writes, d.Writes)
		rs, ok3 := delta(old.SectorsRead, d.SectorsRead)
		ws, ok4 := delta(old.SectorsWrite, d.SectorsWrite)
		busy, ok5 := delta(uint64(old.IOTicks), uint64(d.IOTicks))
		queue, ok6 := delta(uint64(old.QueueTime), uint64(d.QueueTime))
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || (x.Reads == 0 && x.Writes == 0 && busy == 0) {
			continue
		}
		x.Name, x.Major, x.Minor = d.Name, d.Major, d.Minor
		x.ReadBytes, x.WriteBytes = rs*512, ws*512
		if w.Duration > 0 {
			x.Busy = min(1, float64(busy)/float64(w.Duration))
		}
		if n := x.Reads + x.Writes; n > 0 {
			x.Wait = time.Duration(queue / n)
		}
		w.Disks = append(w.Disks, x)
	}
	sort.SliceStable(w.Disks, func(i, j int) bool { return w.Disks[i].Busy > w.Disks[j].Busy })
	if len(w.Disks) > maxWindowDisks {
		w.Disks = w.Disks[:maxWindowDisks]
	}
}

// threads compares the threads of both readings; one born during the
// window counts from zero.
func (w *Window) threads(a, b []ThreadCounters) {
	if len(a) == 0 || len(b) == 0 {
		return // a reading without threads: nothing to compare
	}
	before := make(map[int]ThreadCounters, len(a))
	for _, t := range a {
		before[t.TID] = t
	}
	for _, t := range b {
		old, ok := before[t.TID]
		if !ok {
			old = ThreadCounters{TID: t.TID} // started during the window
		}
		d := ThreadDelta{TID: t.TID}
		d.MajorFaults, _ = delta(old.MajorFaults, t.MajorFaults)
		d.MinorFaults, _ = delta(old.MinorFaults, t.MinorFaults)
		d.Voluntary, _ = delta(old.Voluntary, t.Voluntary)
		d.Involuntary, _ = delta(old.Involuntary, t.Involuntary)
		if d != (ThreadDelta{TID: t.TID}) {
			w.Threads = append(w.Threads, d)
		}
	}
	sort.SliceStable(w.Threads, func(i, j int) bool {
		x, y := w.Threads[i], w.Threads[j]
		if x.MajorFaults != y.MajorFaults {
			return x.MajorFaults > y.MajorFaults
		}
		if x.Involuntary != y.Involuntary {
			return x.Involuntary > y.Involuntary
		}
		return x.TID < y.TID
	})
	if len(w.Threads) > maxWindowThreads {
		w.note("%d threads' counters moved; the %d with the most major faults and preemptions are listed", len(w.Threads), maxWindowThreads)
		w.Threads = w.Threads[:maxWindowThreads]
	}
}
