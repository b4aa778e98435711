package report

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/internal/textfmt"
	"github.com/stallwatch/stallwatch/model"
)

// kernelView is a kernel context as the reports show it: a titled list
// of facts.
type kernelView struct {
	title string
	lines []fact
	notes []string
}

// kernelViews are the capture's kernel contexts: over its window, and
// over the flight recorder's history before the trigger.
func kernelViews(c *Capture) []*kernelView {
	var out []*kernelView
	names := snapNames(c.Threads)
	if k := c.Info.KernelContext; k != nil {
		out = append(out, kernelViewOf(k, "Kernel context over the capture's window ("+fmtDur(k.Duration)+")", names))
	}
	if k := c.Info.KernelBefore; k != nil {
		out = append(out, kernelViewOf(k, "Kernel context before the trigger (the flight recorder's history, "+fmtDur(k.Duration)+")", names))
	}
	return out
}

func snapNames(s *model.Snapshot) map[int]string {
	m := map[int]string{}
	if s != nil {
		for _, t := range s.Threads {
			m[t.TID] = t.Name
		}
	}
	return m
}

func kernelViewOf(k *model.KernelContext, title string, names map[int]string) *kernelView {
	v := &kernelView{title: title, notes: k.Notes}
	add := func(key, value string, warn bool) { v.lines = append(v.lines, fact{key, value, warn}) }
	var cgs []string
	for _, c := range k.Cgroups {
		h := c.Hierarchy
		switch {
		case h == "":
			h = "unified"
		case !strings.Contains(h, "cpu") && !strings.Contains(h, "memory"):
			continue
		}
		cgs = append(cgs, clean(h)+" "+clean(c.Path))
	}
	if len(cgs) > 0 {
		add("cgroups", strings.Join(cgs, " · "), false)
	}
	for _, t := range k.Throttling {
		add("cpu quota", throttlingText(t), t.Limited && t.Throttled > 0)
	}
	for _, m := range k.Memory {
		add("memory", memoryText(m), m.Failcnt+m.MaxEvents+m.OOMKills > 0)
	}
	byScope := map[string][]string{}
	var scopes []string
	for _, p := range k.Pressure {
		if _, ok := byScope[p.Scope]; !ok {
			scopes = append(scopes, p.Scope)
		}
		s := fmt.Sprintf("%s some %s", p.Resource, textfmt.Share(p.Some.Share))
		if p.Full != nil {
			s += " full " + textfmt.Share(p.Full.Share)
		}
		byScope[p.Scope] = append(byScope[p.Scope], s)
	}
	for _, sc := range scopes {
		add("pressure", clean(sc)+": "+strings.Join(byScope[sc], " · ")+" of the window (PSI)", false)
	}
	if h := k.Host; h.Ticks > 0 {
		add("host CPU", fmt.Sprintf("%d CPUs: busy %s, iowait %s, steal %s", h.CPUs, textfmt.Share(h.Busy), textfmt.Share(h.IOWait), textfmt.Share(h.Steal)), h.Steal >= 0.1)
	}
	if r := k.Reclaim; r.Any() || k.OOMKills > 0 {
		add("host memory", fmt.Sprintf("%s allocations in direct reclaim, %s in compaction, %s pages swapped in, %s major faults, %s file pages refaulted, %s OOM kills",
			fmtCount(int64(r.AllocStalls)), fmtCount(int64(r.CompactStalls)), fmtCount(int64(r.SwapIns)), fmtCount(int64(r.MajorFaults)),
			fmtCount(int64(r.RefaultFile)), fmtCount(int64(k.OOMKills))), k.OOMKills > 0)
	}
	for i, d := range k.Disks {
		if i == 3 {
			break
		}
		add("disk", fmt.Sprintf("%s busy %s: %s read, %s written, %s per I/O", clean(d.Name), textfmt.Share(d.Busy),
			textfmt.Bytes(d.ReadBytes), textfmt.Bytes(d.WriteBytes), fmtDur(d.Wait)), d.Busy >= 0.9)
	}
	if s := topThreads(k.Threads, names, func(t model.ThreadCounts) uint64 { return t.MajorFaults }, "major faults"); s != "" {
		add("faults", s, false)
	}
	if s := topThreads(k.Threads, names, func(t model.ThreadCounts) uint64 { return t.Involuntary }, "preemptions"); s != "" {
		add("preempted", s, false)
	}
	return v
}

// kernelSummary is the kernel context in one line, for the first screen:
// the quota's throttling, PSI, steal (the details have the rest).
func kernelSummary(k *model.KernelContext) string {
	var parts []string
	limited := false
	for _, t := range k.Throttling {
		if t.Limited {
			limited = true
			parts = append(parts, fmt.Sprintf("quota %s/%s throttled %s of periods", fmtDur(t.Quota), fmtDur(t.Period), textfmt.Share(t.Share())))
		}
	}
	if !limited && len(k.Throttling) > 0 {
		parts = append(parts, "no CPU quota")
	}
	for _, m := range k.Memory {
		if m.Limited {
			s := fmt.Sprintf("memory limit %s (%s in use", textfmt.Bytes(m.Limit), textfmt.Bytes(m.Usage))
			if m.Failcnt > 0 {
				s += fmt.Sprintf(", hit %s times", fmtCount(int64(m.Failcnt)))
			}
			parts = append(parts, s+")")
			break
		}
	}
	var psi []string
	for _, p := range k.Pressure {
		if p.Scope == "host" || len(psi) < 3 {
			psi = append(psi, fmt.Sprintf("%s %s", p.Resource, textfmt.Share(p.Some.Share)))
		}
	}
	if len(psi) > 0 {
		parts = append(parts, "PSI some "+strings.Join(psi[:min(3, len(psi))], " "))
	}
	if k.Host.Ticks > 0 {
		parts = append(parts, "steal "+textfmt.Share(k.Host.Steal))
	}
	if k.OOMKills > 0 {
		parts = append(parts, fmt.Sprintf("%d OOM kills", k.OOMKills))
	}
	return strings.Join(parts, " · ") + " (details below)"
}

func throttlingText(t model.Throttling) string {
	who := clean(t.Path)
	if t.Own {
		who += " (its own)"
	}
	if !t.Limited {
		return who + ": no quota"
	}
	return fmt.Sprintf("%s: %s every %s (%s CPU); %d of %d periods throttled (%s), held %s",
		who, fmtDur(t.Quota), fmtDur(t.Period), strconv.FormatFloat(float64(t.Quota)/float64(t.Period), 'g', 3, 64),
		t.Throttled, t.Periods, textfmt.Share(t.Share()), fmtDur(t.ThrottledTime))
}

func memoryText(m model.MemoryCgroup) string {
	who := clean(m.Path)
	if m.Own {
		who += " (its own)"
	}
	var parts []string
	if m.Limited {
		parts = append(parts, "limit "+textfmt.Bytes(m.Limit))
	} else {
		parts = append(parts, "no limit")
	}
	if m.HighSet {
		parts = append(parts, "high "+textfmt.Bytes(m.High))
	}
	parts = append(parts, textfmt.Bytes(m.Usage)+" in use")
	if m.Failcnt > 0 {
		parts = append(parts, fmt.Sprintf("hit the limit %s times", fmtCount(int64(m.Failcnt))))
	}
	if m.MaxEvents+m.HighEvents > 0 {
		parts = append(parts, fmt.Sprintf("over max %s and high %s times", fmtCount(int64(m.MaxEvents)), fmtCount(int64(m.HighEvents))))
	}
	if m.OOMKills > 0 {
		parts = append(parts, fmt.Sprintf("%s OOM kills", fmtCount(int64(m.OOMKills))))
	}
	if m.UnderOOM {
		parts = append(parts, "out of memory now")
	}
	if m.MajorFaults > 0 {
		parts = append(parts, fmt.Sprintf("%s major faults", fmtCount(int64(m.MajorFaults))))
	}
	return who + ": " + strings.Join(parts, ", ")
}

// topThreads names the three threads with the most of a counter.
func topThreads(ts []model.ThreadCounts, names map[int]string, v func(model.ThreadCounts) uint64, what string) string {
	sorted := append([]model.ThreadCounts(nil), ts...)
	sort.SliceStable(sorted, func(i, j int) bool { return v(sorted[i]) > v(sorted[j]) })
	var parts []string
	for _, t := range sorted {
		if len(parts) == 3 || v(t) == 0 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s", textfmt.ThreadLabel(t.TID, &model.Thread{Name: names[t.TID]}), fmtCount(int64(v(t)))))
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, ", ") + " " + what
}

// waitGroup is the threads of the snapshot that wait on one thing
// (model.Wait.Subject), with their off-CPU time and stacks.
type waitGroup struct {
	subject string
	tids    []int
	names   []string
	// blocked is their off-CPU time, not preempted, in the judged phase
	// of the profile; longest the longest the snapshot found one of them
	// off the CPU.
	blocked int64
	longest time.Duration
	stacks  []*stackTotal
}

// waitGroups groups the snapshot's waiting threads by what they wait on,
// the longest waits first.
func waitGroups(c *Capture, a *stackTable) []*waitGroup {
	snap := c.Threads
	if snap == nil {
		return nil
	}
	by := map[string]*waitGroup{}
	var out []*waitGroup
	for _, t := range snap.Threads {
		if t.Wait == nil || t.State == 'R' {
			continue
		}
		key := t.Wait.Subject()
		g := by[key]
		if g == nil {
			g = &waitGroup{subject: key}
			by[key] = g
			out = append(out, g)
		}
		g.tids = append(g.tids, t.TID)
		g.names = append(g.names, textfmt.ThreadLabel(t.TID, &t))
		if t.OffCPUKnown {
			g.longest = max(g.longest, t.OffCPUFor)
		}
	}
	if a != nil {
		offI, err := valueIndex(a.p, model.TypeOffCPUTime)
		if err == nil && hasType(a.p, model.TypeOffCPUTime) {
			phase := a.phases()[0]
			for _, g := range out {
				in := map[string]bool{}
				for _, tid := range g.tids {
					in[strconv.Itoa(tid)] = true
				}
				keep := func(ls *labelSet) bool {
					return ls.phase == phase && in[ls.tidText] && ls.offCPU != "preempted"
				}
				vals, total := a.totals(offI, keep)
				g.blocked = total
				g.stacks, _ = a.top(vals, 2, offI, keep)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].waited() > out[j].waited() })
	return out
}

// waited is how long a group waited: its off-CPU time in the window, or
// how long the snapshot found one of them off the CPU when that is more
// (a wait the samples saw only in part).
func (g *waitGroup) waited() time.Duration { return max(time.Duration(g.blocked), g.longest) }

func (g *waitGroup) timeText() string {
	switch {
	case g.waited() == 0:
		return "-"
	case g.longest > time.Duration(g.blocked):
		return "≥ " + fmtDur(g.longest)
	}
	return fmtDur(time.Duration(g.blocked))
}
