package analysis

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/internal/textfmt"
	"github.com/stallwatch/stallwatch/model"
)

// Thresholds of the kernel's findings, as shares of the window.
const (
	// A cgroup that used up its quota in this share of the window's
	// enforcement periods throttled the process; critical from
	// throttleCritical.
	throttleShare    = 0.2
	throttleCritical = 0.5
	// The hypervisor's steal, as a share of all of the host's CPU time,
	// that takes CPU from a process that wanted it.
	stealShare = 0.1
	// A thread in the kernel's memory or I/O waits for this share of the
	// window.
	memShare = 0.1
	ioShare  = 0.2
)

// kernelWindow is the kernel context of the judged window: the capture's
// (from the trigger or the recording's start), else, when only the
// flight recorder's samples are judged, the history's.
func (e *evidence) kernelWindow() *model.KernelContext {
	if e.phase == model.PhaseBefore && e.info.KernelBefore != nil {
		return e.info.KernelBefore
	}
	return e.info.KernelContext
}

// throttled is the cgroup that throttled the process most in the window,
// the process's own or one above it; ok is false when none used its quota
// up in throttleShare of its periods.
func (e *evidence) throttled() (model.Throttling, bool) {
	k := e.kernelWindow()
	if k == nil {
		return model.Throttling{}, false
	}
	var best model.Throttling
	found := false
	for _, t := range k.Throttling {
		if !t.Limited || t.Periods == 0 || t.Share() < throttleShare {
			continue
		}
		if !found || t.Share() > best.Share() {
			best, found = t, true
		}
	}
	return best, found
}

// cpuThrottled: the process's cgroup, or one above it, used its CPU quota
// up in a large share of the window's periods, and its threads were held
// off the CPUs until the next period. It takes the place of CPU
// starvation: the quota, not the host, kept them waiting.
func (e *evidence) cpuThrottled() []finding {
	th, ok := e.throttled()
	if !ok {
		return nil
	}
	which := "its cgroup " + textfmt.Clean(th.Path)
	if !th.Own {
		which = "the cgroup " + textfmt.Clean(th.Path) + ", above its own"
		if own := e.ownCgroup(); own != "" {
			which += " (" + textfmt.Clean(own) + ")"
		}
	}
	quota := fmt.Sprintf("%s of CPU every %s (%s CPU)", textfmt.Dur(th.Quota), textfmt.Dur(th.Period), trimCPUs(float64(th.Quota)/float64(th.Period)))
	summary := fmt.Sprintf("CPU throttled: the quota of %s, %s, was used up in %d of %d periods (%s) %s; its threads were held %s in all.",
		which, quota, th.Throttled, th.Periods, textfmt.Share(th.Share()), e.when, textfmt.Dur(th.ThrottledTime))
	var sb strings.Builder
	burners, tids := e.burners(5)
	if len(burners) > 0 {
		fmt.Fprintf(&sb, "The threads that burn the quota: %s.", strings.Join(burners, "; "))
	}
	if starved := e.starved(); len(starved) > 0 {
		var ws []string
		for i, t := range starved {
			if i == 5 {
				ws = append(ws, fmt.Sprintf("%d more", len(starved)-i))
				break
			}
			ws = append(ws, fmt.Sprintf("%s waited %s (%s)", t.label(), textfmt.Dur(time.Duration(t.preempted)), e.pctOf(t.preempted)))
			if !containsInt(tids, t.tid) {
				tids = append(tids, t.tid)
			}
		}
		fmt.Fprintf(&sb, " Runnable but held off the CPUs: %s — by the quota, not by the host.", strings.Join(ws, "; "))
	}
	limit := "cpu.max"
	if !th.V2 {
		limit = "cpu.cfs_quota_us"
	}
	fmt.Fprintf(&sb, " Raise the limit (%s of %s; a container's CPU limit), or lower the threads that burn it.", limit, textfmt.Clean(th.Path))
	sev := model.SeverityWarning
	if th.Share() >= throttleCritical {
		sev = model.SeverityCritical
	}
	return []finding{e.newFinding(model.FindingCPUThrottled, sev, th.Share(), tids, summary, strings.TrimSpace(sb.String()))}
}

func trimCPUs(c float64) string {
	s := fmt.Sprintf("%.2f", c)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "" {
		return "0"
	}
	return s
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// ownCgroup is the process's cgroup in the hierarchy of the cpu
// controller (or the unified one).
func (e *evidence) ownCgroup() string {
	k := e.kernelWindow()
	if k == nil {
		return ""
	}
	for _, t := range k.Throttling {
		if t.Own {
			return t.Path
		}
	}
	return ""
}

// burners names the threads that used the most CPU in the window.
func (e *evidence) burners(n int) ([]string, []int) {
	var out []string
	var tids []int
	for _, t := range e.byCPU() {
		if t.cpu == 0 || len(out) == n {
			break
		}
		out = append(out, fmt.Sprintf("%s ran %s (%s)", t.label(), textfmt.Dur(time.Duration(t.cpu)), e.pctOf(t.cpu)))
		tids = append(tids, t.tid)
	}
	return out, tids
}

// starved are the threads runnable but off a CPU for starveShare of the
// window and at least as long as they ran, most waiting first.
func (e *evidence) starved() []*threadTime {
	var out []*threadTime
	for _, t := range e.byCPU() {
		if e.share(t.preempted) >= starveShare && t.preempted >= t.cpu {
			out = append(out, t)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].preempted > out[j].preempted })
	return out
}

// steal: the hypervisor ran something else on this machine's virtual
// CPUs for a large share of the window while the process wanted them.
func (e *evidence) steal() []finding {
	k := e.kernelWindow()
	if k == nil || k.Host.Steal < stealShare {
		return nil
	}
	var cpu, waited int64
	for _, t := range e.threads {
		cpu += t.cpu
		waited = max(waited, t.preempted)
	}
	if e.share(cpu) < 0.5 && e.share(waited) < starveShare {
		return nil // the process did not want the CPU it lacked
	}
	summary := fmt.Sprintf("The hypervisor took %s of this machine's CPU time %s (steal): its %d virtual CPUs ran other guests while this process's threads wanted them.",
		textfmt.Share(k.Host.Steal), e.when, k.Host.CPUs)
	detail := "Steal is time a virtual CPU was ready to run and the hypervisor ran something else: the host is oversubscribed. Move the VM to a less loaded host, or ask for dedicated CPUs (an instance type without CPU credits or bursting)."
	sev := model.SeverityWarning
	if k.Host.Steal >= throttleCritical {
		sev = model.SeverityCritical
	}
	return []finding{e.newFinding(model.FindingCPUSteal, sev, k.Host.Steal, nil, summary, detail)}
}

// memWait is one way the kernel makes a thread wait for memory, and the
// functions that show it in a kernel stack.
type memWait struct {
	what  string
	funcs []string
}

// memWaits, in the order a stack is classified: a stack is the first
// wait it matches (a memory cgroup's reclaim runs through the functions
// of direct reclaim too). mm/vmscan.c, mm/memcontrol.c, mm/compaction.c,
// mm/swap_state.c, mm/page-writeback.c.
var memWaits = []memWait{
	{"reclaim at its memory cgroup's limit", []string{"try_to_free_mem_cgroup_pages", "mem_cgroup_handle_over_high", "reclaim_high"}},
	{"direct reclaim", []string{"try_to_free_pages", "__alloc_pages_direct_reclaim", "__perform_reclaim", "do_try_to_free_pages", "throttle_direct_reclaim"}},
	{"compaction", []string{"__alloc_pages_direct_compact", "try_to_compact_pages", "compact_zone"}},
	{"swap-in", []string{"swap_readpage", "swap_read_folio", "do_swap_page", "swapin_readahead", "swap_cluster_readahead"}},
	{"writeback throttling", []string{"balance_dirty_pages"}},
	{"reclaim throttling", []string{"reclaim_throttle"}},
}

// pageReads are the functions of a page fault that waits for its page to
// be read: a mapped file's pages read back after reclaim took them
// (memory pressure), or read for the first time (I/O).
var pageReads = []string{"filemap_fault"}

// memClass is the memory wait a stack is in: an index of waits, or -1.
func (e *evidence) memClass(id int, waits []memWait) int {
	for i, w := range waits {
		if e.stackHasKernel(id, w.funcs) {
			return i
		}
	}
	return -1
}

// firstKernelMatch is the kernel frame of stack id that matches the
// first of pats any frame matches; "" for none.
func (e *evidence) firstKernelMatch(id int, pats []string) string {
	for _, p := range pats {
		for _, f := range e.a.stacks[id] {
			if f.Kind == model.KindKernel && strings.HasPrefix(f.Name, p) {
				return f.Name
			}
		}
	}
	return ""
}

// kernelMatch says whether a kernel function is one of pats: its name
// begins with one (compilers add ".isra.0", ".constprop.0"; a pattern
// may name a family: io_schedule, io_schedule_timeout).
func kernelMatch(name string, pats []string) bool {
	for _, p := range pats {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// stackHasKernel says whether stack id has a kernel frame matching pats.
func (e *evidence) stackHasKernel(id int, pats []string) bool {
	for _, f := range e.a.stacks[id] {
		if f.Kind == model.KindKernel && kernelMatch(f.Name, pats) {
			return true
		}
	}
	return false
}

// memTimes sums, per wait and thread, the window's time in stacks of each
// memory wait; on or off the CPU, preempted or not.
func (e *evidence) memTimes(waits []memWait) []map[int]int64 {
	out := make([]map[int]int64, len(waits))
	for i := range out {
		out[i] = map[int]int64{}
	}
	class := map[int]int{}
	for _, t := range e.threads {
		for _, stacks := range []map[int]int64{t.cpuStacks, t.offStacks} {
			for id, v := range stacks {
				c, ok := class[id]
				if !ok {
					c = e.memClass(id, waits)
					class[id] = c
				}
				if c >= 0 {
					out[c][t.tid] += v
				}
			}
		}
	}
	return out
}

// memoryCounters says what the kernel counted of memory pressure on the
// process in the window: its memory cgroup at its limit, direct reclaim
// and swap-ins on the host, its threads' major faults. Empty: nothing.
func memoryCounters(k *model.KernelContext) []string {
	if k == nil {
		return nil
	}
	var out []string
	for _, m := range k.Memory {
		where := "its memory cgroup " + textfmt.Clean(m.Path)
		if !m.Own {
			where = "the memory cgroup " + textfmt.Clean(m.Path) + " above it"
		}
		limit := ""
		if m.Limited {
			limit = fmt.Sprintf(" (limit %s, %s in use)", textfmt.Bytes(m.Limit), textfmt.Bytes(m.Usage))
		}
		switch {
		case m.Failcnt > 0:
			out = append(out, fmt.Sprintf("%s hit its limit %d times%s", where, m.Failcnt, limit))
		case m.MaxEvents > 0 || m.HighEvents > 0:
			out = append(out, fmt.Sprintf("%s went over memory.max %d and memory.high %d times%s", where, m.MaxEvents, m.HighEvents, limit))
		}
		if m.StealDirect > 0 {
			out = append(out, fmt.Sprintf("direct reclaim took %d pages from %s", m.StealDirect, where))
		}
	}
	if r := k.Reclaim; r.AllocStalls > 0 || r.SwapIns > 0 || r.CompactStalls > 0 {
		out = append(out, fmt.Sprintf("on the host: %d allocations stalled in direct reclaim, %d in compaction, %d pages swapped in", r.AllocStalls, r.CompactStalls, r.SwapIns))
	}
	var faults uint64
	for _, t := range k.Threads {
		faults += t.MajorFaults
	}
	if faults > 0 {
		out = append(out, fmt.Sprintf("its threads had %d major faults (pages read from a file or swap)", faults))
	}
	return out
}

// memoryPressure: the process's threads spent a large share of the window
// in the kernel waiting for memory: reclaiming it themselves (direct
// reclaim, at the host's watermarks or at their cgroup's limit),
// compacting it, reading pages back from swap, held back for dirtying
// pages faster than they are written, or faulting back the pages of
// mapped files that reclaim took.
func (e *evidence) memoryPressure() []finding {
	if e.a == nil {
		return nil
	}
	k := e.kernelWindow()
	counted := memoryCounters(k)
	type cause struct {
		what  string
		fn    string
		total int64
		most  int64
		tids  []int
	}
	waits := memWaits
	// Faults that read pages back are memory pressure only when the
	// kernel counted some; else they are a file read for the first time.
	if reclaimed(k) {
		waits = append(slices.Clip(waits), memWait{"faults reading back pages reclaim took", pageReads})
	}
	var causes []cause
	threads := map[int]int64{}
	for i, by := range e.memTimes(waits) {
		if len(by) == 0 {
			continue
		}
		c := cause{what: waits[i].what}
		for tid, v := range by {
			threads[tid] += v
			c.total += v
			c.most = max(c.most, v)
		}
		c.tids = topTIDs(by, 5)
		c.fn = e.kernelFuncIn(by, waits[i].funcs)
		causes = append(causes, c)
	}
	var most int64
	for _, v := range threads {
		most = max(most, v)
	}
	if len(causes) == 0 || e.share(most) < memShare {
		return nil
	}
	sort.SliceStable(causes, func(i, j int) bool { return causes[i].total > causes[j].total })
	var parts, fns []string
	var tids []int
	for _, c := range causes {
		parts = append(parts, fmt.Sprintf("%s %s (%s)", c.what, textfmt.Dur(time.Duration(c.total)), c.fn))
		fns = append(fns, c.fn)
		for _, tid := range c.tids {
			if !containsInt(tids, tid) {
				tids = append(tids, tid)
			}
		}
	}
	if e.window > 0 {
		most = min(most, e.window) // intervals that straddle the window's edges
	}
	summary := fmt.Sprintf("Memory pressure: the process's threads waited for memory in the kernel %s — %s; one thread %s (%s).",
		e.when, strings.Join(parts, ", "), textfmt.Dur(time.Duration(most)), e.pctOf(most))
	var sb strings.Builder
	if len(counted) > 0 {
		fmt.Fprintf(&sb, "The kernel counted it: %s. ", strings.Join(counted, "; "))
	}
	sb.WriteString(memoryAdvice(causes[0].what, k))
	if p, ok := pressureOf(k, "memory"); ok {
		fmt.Fprintf(&sb, " Memory pressure (PSI, %s): some %s of the window", p.Scope, textfmt.Share(p.Some.Share))
		if p.Full != nil {
			fmt.Fprintf(&sb, ", full %s", textfmt.Share(p.Full.Share))
		}
		sb.WriteString(".")
	}
	sev := model.SeverityWarning
	if e.share(most) >= pauseCritical {
		sev = model.SeverityCritical
	}
	f := e.newFinding(model.FindingMemoryPressure, sev, e.share(most), tids, summary, strings.TrimSpace(sb.String()))
	f.Functions = fns
	return []finding{f}
}

// reclaimed says whether the kernel counted reclaim that faults then read
// back: the process's memory cgroup at its limit, direct reclaim or
// swap-ins on the host, refaults of reclaimed pages.
func reclaimed(k *model.KernelContext) bool {
	if k == nil {
		return false
	}
	for _, m := range k.Memory {
		if m.Failcnt > 0 || m.MaxEvents > 0 || m.HighEvents > 0 || m.StealDirect > 0 {
			return true
		}
	}
	r := k.Reclaim
	return r.AllocStalls > 0 || r.StealDirect > 0 || r.SwapIns > 0
}

func memoryAdvice(what string, k *model.KernelContext) string {
	limited := false
	if k != nil {
		for _, m := range k.Memory {
			limited = limited || m.Limited || m.HighSet
		}
	}
	switch {
	case what == "writeback throttling":
		return "The process dirties pages faster than the disk writes them back, and the kernel makes it wait (vm.dirty_ratio, vm.dirty_bytes): write less, or to a faster disk."
	case what == "swap-in":
		return "Its memory was swapped out and is read back as it is touched: give it (or the host) more memory, or let it use less."
	case limited:
		return "Its working set does not fit its memory cgroup's limit: raise the limit (memory.max, memory.limit_in_bytes; a container's memory limit) above the working set, or make the working set smaller."
	}
	return "The host is short of memory: free some (other processes, caches), add memory, or let the process use less."
}

// kernelFuncIn is the kernel function most of a cause's time was in, as
// the stacks name it: in each stack, the frame of the first of pats (the
// most telling first) that it has.
func (e *evidence) kernelFuncIn(by map[int]int64, pats []string) string {
	count := map[string]int64{}
	for tid := range by {
		t := e.threads[tid]
		for _, stacks := range []map[int]int64{t.cpuStacks, t.offStacks} {
			for id, v := range stacks {
				if fn := e.firstKernelMatch(id, pats); fn != "" {
					count[fn] += v
				}
			}
		}
	}
	best, bv := "", int64(-1)
	for fn, v := range count {
		if v > bv || (v == bv && fn < best) {
			best, bv = fn, v
		}
	}
	return best
}

func topTIDs(by map[int]int64, n int) []int {
	tids := make([]int, 0, len(by))
	for tid := range by {
		tids = append(tids, tid)
	}
	sort.Slice(tids, func(i, j int) bool {
		if by[tids[i]] != by[tids[j]] {
			return by[tids[i]] > by[tids[j]]
		}
		return tids[i] < tids[j]
	})
	return tids[:min(n, len(tids))]
}

// pressureOf is a resource's PSI in the window: the cgroup's when the
// kernel has it, else the host's.
func pressureOf(k *model.KernelContext, resource string) (model.Pressure, bool) {
	if k == nil {
		return model.Pressure{}, false
	}
	var host model.Pressure
	found := false
	for _, p := range k.Pressure {
		if p.Resource != resource {
			continue
		}
		if p.Scope != "host" {
			return p, true
		}
		host, found = p, true
	}
	return host, found
}

// ioWaits are the kernel functions a thread blocked on I/O sleeps in.
var ioWaits = []string{"io_schedule", "folio_wait_bit", "wait_on_page_bit", "folio_wait_writeback", "wait_on_page_writeback",
	"blk_mq_get_tag", "jbd2_log_wait_commit", "file_write_and_wait_range", "__filemap_fdatawait_range", "blkdev_issue_flush"}

// ioPressure: threads blocked on I/O for a large share of the window,
// with the files and devices they wait on (the snapshot's descriptors,
// /proc/diskstats) and the I/O pressure the kernel measured.
func (e *evidence) ioPressure() []finding {
	k := e.kernelWindow()
	if e.a == nil || k == nil {
		return nil // without the kernel's numbers, the D-state finding says it
	}
	memory := memWaitFuncs()
	if reclaimed(k) {
		memory = append(memory, pageReads...) // pages read back: memory pressure's
	}
	byThread := map[int]int64{}
	var total, most int64
	for _, t := range e.threads {
		var v int64
		for id, ns := range t.offStacks {
			if e.stackHasKernel(id, ioWaits) && !e.stackHasKernel(id, memory) {
				v += ns
			}
		}
		if v > 0 {
			byThread[t.tid] = v
			total += v
			most = max(most, v)
		}
	}
	if e.share(most) < ioShare {
		return nil
	}
	fn := e.kernelFuncIn(byThread, ioWaits)
	tids := topTIDs(byThread, 5)
	names := make([]string, len(tids))
	for i, tid := range tids {
		names[i] = e.threads[tid].label()
	}
	files := e.ioFiles(byThread)
	on := ""
	if len(files) > 0 {
		on = " on " + strings.Join(files, ", ")
	}
	summary := fmt.Sprintf("I/O: %s blocked on I/O%s %s, the longest %s (%s) in %s: %s.",
		textfmt.Plural(len(byThread), "thread", "threads"), on, e.when, textfmt.Dur(time.Duration(most)), e.pctOf(most), fn, textfmt.List(names, 5))
	var sb strings.Builder
	if k != nil && len(k.Disks) > 0 {
		d := k.Disks[0]
		fmt.Fprintf(&sb, "The busiest disk, %s, had I/O in flight %s of the window (%s read, %s written, %s per I/O). ",
			textfmt.Clean(d.Name), textfmt.Share(d.Busy), textfmt.Bytes(d.ReadBytes), textfmt.Bytes(d.WriteBytes), textfmt.Dur(d.Wait))
	}
	if p, ok := pressureOf(k, "io"); ok {
		fmt.Fprintf(&sb, "I/O pressure (PSI, %s): some %s of the window", p.Scope, textfmt.Share(p.Some.Share))
		if p.Full != nil {
			fmt.Fprintf(&sb, ", full %s", textfmt.Share(p.Full.Share))
		}
		sb.WriteString(". ")
	}
	sb.WriteString("The disk is slower than what the process asks of it: fewer or larger writes (fsync less often), a faster disk, or I/O moved off the threads that must answer.")
	sev := model.SeverityWarning
	if e.share(most) >= pauseCritical {
		sev = model.SeverityCritical
	}
	f := e.newFinding(model.FindingIOPressure, sev, e.share(most), tids, summary, sb.String())
	if fn != "" {
		f.Functions = []string{fn}
	}
	return []finding{f}
}

func memWaitFuncs() []string {
	var out []string
	for _, w := range memWaits {
		out = append(out, w.funcs...)
	}
	return out
}

// ioFiles names the files and devices the snapshot's threads waited on,
// those of the threads blocked on I/O first.
func (e *evidence) ioFiles(byThread map[int]int64) []string {
	if e.snap == nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, tid := range topTIDs(byThread, len(byThread)) {
		t := e.ix[tid]
		if t == nil || t.Wait == nil || t.Wait.On == nil || t.Wait.On.Path == "" {
			continue
		}
		s := textfmt.Clean(t.Wait.On.Path)
		if t.Wait.On.Device != "" {
			s += " (" + textfmt.Clean(t.Wait.On.Device) + ")"
		}
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out[:min(3, len(out))]
}

// oomKills: the OOM killer killed in the process's memory cgroup (or one
// above it) during the window, or on the host.
func (e *evidence) oomKills() []finding {
	k := e.kernelWindow()
	if k == nil {
		return nil
	}
	for _, m := range k.Memory {
		if m.OOMKills == 0 {
			continue
		}
		where := "its memory cgroup " + textfmt.Clean(m.Path)
		if !m.Own {
			where = "the memory cgroup " + textfmt.Clean(m.Path) + " above it"
		}
		summary := fmt.Sprintf("The OOM killer killed %s in %s %s.", textfmt.Plural(int(m.OOMKills), "process", "processes"), where, e.when)
		detail := "A process of the cgroup ran it out of memory"
		if m.Limited {
			detail += fmt.Sprintf(" (limit %s)", textfmt.Bytes(m.Limit))
		}
		detail += ": the kernel's log (dmesg) names the one killed. Raise the limit, or find what grew."
		return []finding{e.newFinding(model.FindingOOMKill, model.SeverityCritical, float64(m.OOMKills), nil, summary, detail)}
	}
	if k.OOMKills > 0 {
		return []finding{e.newFinding(model.FindingOOMKill, model.SeverityInfo, float64(k.OOMKills), nil,
			fmt.Sprintf("The host's OOM killer killed %s %s, outside the process's memory cgroup.", textfmt.Plural(int(k.OOMKills), "process", "processes"), e.when),
			"The host ran out of memory: the kernel's log (dmesg) names the process killed.")}
	}
	return nil
}

// blockedOnPeer: threads blocked, for most of the window, in a system
// call on a descriptor whose other end is another process — a socket's
// peer, a pipe's reader or writer — grouped by what they wait on. A peer
// that is stopped or gone is the cause; one that sleeps is where to look
// next.
func (e *evidence) blockedOnPeer() []finding {
	if e.snap == nil {
		return nil
	}
	type group struct {
		subject string
		threads []*model.Thread
		longest time.Duration
		peers   []model.WaitPeer
	}
	var order []string
	groups := map[string]*group{}
	for i := range e.snap.Threads {
		t := &e.snap.Threads[i]
		on := waitedOnPeer(t)
		if on == nil {
			continue
		}
		d, ok := e.blockedFor(t)
		if !ok {
			continue
		}
		key := on.Subject()
		g := groups[key]
		if g == nil {
			g = &group{subject: key, peers: on.Peers}
			groups[key] = g
			order = append(order, key)
		}
		g.threads = append(g.threads, t)
		g.longest = max(g.longest, d)
	}
	var out []finding
	for _, key := range order {
		g := groups[key]
		first := g.threads[0]
		var tids []int
		var names []string
		for _, t := range g.threads {
			tids = append(tids, t.TID)
			names = append(names, e.ix.name(t.TID))
		}
		call := "a system call"
		if first.Syscall != nil {
			call = textfmt.Clean(first.Syscall.Name)
		}
		var summary string
		if len(g.threads) == 1 {
			summary = fmt.Sprintf("Thread%s blocked %s in %s on %s.", strings.TrimPrefix(e.ix.name(first.TID), "tid"), textfmt.Dur(g.longest), call, textfmt.Clean(first.Wait.On.Desc))
		} else {
			summary = fmt.Sprintf("%d threads blocked in %s on %s, the longest %s: %s.", len(g.threads), call, textfmt.Clean(g.subject), textfmt.Dur(g.longest), textfmt.List(names, 5))
		}
		sev, detail := model.SeverityWarning, ""
		for _, p := range g.peers {
			if p.Self {
				continue
			}
			who := fmt.Sprintf("pid %d (%s)", p.PID, textfmt.Clean(p.Name))
			switch p.State {
			case "stopped", "traced":
				sev = model.SeverityCritical
				detail += fmt.Sprintf("%s is %s (a SIGSTOP, a job-control stop or a debugger): what it holds does not move until it continues (kill -CONT %d, or the debugger lets go). ", who, p.State, p.PID)
			case "exited":
				sev = model.SeverityCritical
				detail += fmt.Sprintf("%s has exited: nothing will answer. ", who)
			default:
				detail += fmt.Sprintf("What %s is doing decides when they go on: `stallwatch snapshot -p %d` shows its threads. ", who, p.PID)
			}
		}
		out = append(out, e.newFinding(model.FindingBlockedOnPeer, sev, float64(g.longest), tids, summary, strings.TrimSpace(detail)))
	}
	return out
}

// waitedOnPeer is what a thread blocked on a descriptor waits on when the
// other end is another process; nil for an event loop's poll set or a
// listening socket (waiting for work is not a stall's cause).
func waitedOnPeer(t *model.Thread) *model.WaitTarget {
	if t.Wait == nil || t.Wait.On == nil || t.State == 'R' {
		return nil
	}
	on := t.Wait.On
	if on.Kind == "epoll" || on.State == "LISTEN" {
		return nil
	}
	for _, p := range on.Peers {
		if !p.Self {
			return on
		}
	}
	return nil
}

// blockedFor is how long a thread had been blocked, when that is most of
// the window (or the window is unknown: a snapshot alone).
func (e *evidence) blockedFor(t *model.Thread) (time.Duration, bool) {
	// The snapshot's (since it blocked, at the snapshot), or the
	// samples' (blocked in the window), whichever is longer.
	var d time.Duration
	if t.OffCPUKnown {
		d = t.OffCPUFor
	}
	if tt := e.threads[t.TID]; tt != nil {
		d = max(d, time.Duration(tt.blocked))
	}
	if e.window <= 0 {
		return d, true
	}
	return d, float64(d) >= waitShare*float64(e.window)
}

// starvationCauses says which causes of runnable threads waiting the
// kernel's numbers leave, so that the starvation finding suggests no
// cause they rule out: "" when there are none (no kernel context).
func (e *evidence) starvationCauses() string {
	k := e.kernelWindow()
	if k == nil {
		return ""
	}
	var parts []string
	quota := false
	for _, t := range k.Throttling {
		if t.Limited {
			quota = true
			parts = append(parts, fmt.Sprintf("the CPU quota of %s throttled it in %d of %d periods only", textfmt.Clean(t.Path), t.Throttled, t.Periods))
		}
	}
	if !quota {
		parts = append(parts, "no CPU quota is set on its cgroups")
	}
	if k.Host.Steal >= 0.02 {
		parts = append(parts, fmt.Sprintf("the hypervisor took %s of the host's CPU time (steal)", textfmt.Share(k.Host.Steal)))
	} else if k.Host.Ticks > 0 {
		parts = append(parts, "no steal")
	}
	if p, ok := pressureOf(k, "cpu"); ok {
		parts = append(parts, fmt.Sprintf("CPU pressure (PSI, %s) some %s of the window", p.Scope, textfmt.Share(p.Some.Share)))
	}
	return "The kernel: " + strings.Join(parts, "; ") + "."
}
