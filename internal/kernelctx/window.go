package kernelctx

import (
	"fmt"
	"sort"
	"time"

	"github.com/stallwatch/stallwatch/model"
)

// maxWindowDisks bounds the devices a window lists.
const maxWindowDisks = 16

// maxWindowThreads bounds the threads a window lists.
const maxWindowThreads = 4096

// window builds a model.KernelContext from two readings.
type window struct{ *model.KernelContext }

// Between compares two readings of the same process, a before b. A
// counter that went down (its cgroup was made anew) is left out with a
// note.
func Between(a, b *Reading) *model.KernelContext {
	w := &window{&model.KernelContext{Start: a.Time, End: b.Time}}
	if b.Mono > a.Mono {
		w.Duration = time.Duration(b.Mono - a.Mono)
	}
	for _, err := range append(append([]error(nil), a.Errs...), b.Errs...) {
		w.note("%v", err)
	}
	for _, m := range b.Cgroups {
		h := joinControllers(m.Controllers)
		w.Cgroups = append(w.Cgroups, model.Cgroup{Hierarchy: h, Path: m.Path})
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
	return w.KernelContext
}

func (w *window) note(format string, args ...any) {
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

func (w *window) throttling(a, b *Reading) {
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
		t := model.Throttling{Path: g.Dir.Path, V2: g.V2, Own: i == 0, Limited: g.Quota.Limited, Quota: g.Quota.Quota, Period: g.Quota.Period}
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

func (w *window) memory(a, b *Reading) {
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
		m := model.MemoryCgroup{Path: g.Dir.Path, V2: g.V2, Own: i == 0, Limit: g.Mem.Limit, Limited: g.Mem.Limited,
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

func (w *window) pressure(scope string, a, b *Pressures) {
	if a == nil || b == nil {
		return
	}
	for _, r := range []struct {
		name string
		a, b PSI
	}{{"cpu", a.CPU, b.CPU}, {"memory", a.Memory, b.Memory}, {"io", a.IO, b.IO}} {
		p := model.Pressure{Scope: scope, Resource: r.name, Some: w.stall(r.a.Some, r.b.Some)}
		if r.b.HasFull && r.a.HasFull {
			full := w.stall(r.a.Full, r.b.Full)
			p.Full = &full
		}
		w.Pressure = append(w.Pressure, p)
	}
}

func (w *window) stall(a, b Stall) model.PressureStall {
	s := model.PressureStall{Avg10: b.Avg10, Avg60: b.Avg60}
	if b.Total > a.Total {
		s.Stalled = b.Total - a.Total
	}
	if w.Duration > 0 {
		s.Share = min(1, float64(s.Stalled)/float64(w.Duration))
	}
	return s
}

func (w *window) host(a, b CPUTimes) {
	total, ok := delta(a.Total(), b.Total())
	if !ok || total == 0 {
		return
	}
	share := func(x, y uint64) float64 {
		d, _ := delta(x, y)
		return min(1, float64(d)/float64(total))
	}
	w.Host = model.HostCPU{
		CPUs:   b.CPUs,
		Ticks:  total,
		Steal:  share(a.Steal, b.Steal),
		IOWait: share(a.IOWait, b.IOWait),
		Busy:   share(a.User+a.Nice+a.System+a.IRQ+a.SoftIRQ, b.User+b.Nice+b.System+b.IRQ+b.SoftIRQ),
	}
}

func (w *window) vm(a, b VMStat) {
	d := func(x, y uint64) uint64 { v, _ := delta(x, y); return v }
	w.OOMKills = d(a.OOMKills, b.OOMKills)
	w.Reclaim = model.Reclaim{
		AllocStalls: d(a.AllocStalls, b.AllocStalls), ScanDirect: d(a.ScanDirect, b.ScanDirect),
		StealDirect: d(a.StealDirect, b.StealDirect), CompactStalls: d(a.CompactStalls, b.CompactStalls),
		SwapIns: d(a.SwapIns, b.SwapIns), MajorFaults: d(a.MajorFaults, b.MajorFaults),
		RefaultFile: d(a.RefaultFile, b.RefaultFile), RefaultAnon: d(a.RefaultAnon, b.RefaultAnon),
	}
}

// disks lists the devices that did I/O, busiest first.
func (w *window) disks(a, b []DiskStat) {
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
		var x model.Disk
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
func (w *window) threads(a, b []ThreadCounters) {
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
		d := model.ThreadCounts{TID: t.TID}
		d.MajorFaults, _ = delta(old.MajorFaults, t.MajorFaults)
		d.MinorFaults, _ = delta(old.MinorFaults, t.MinorFaults)
		d.Voluntary, _ = delta(old.Voluntary, t.Voluntary)
		d.Involuntary, _ = delta(old.Involuntary, t.Involuntary)
		if d != (model.ThreadCounts{TID: t.TID}) {
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
