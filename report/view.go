package report

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/model"
)

// view is what report.txt and report.html show, computed once from a
// Capture; the two renderings only lay it out.
type view struct {
	notes    []string // all of them; facts has the first few
	title    string
	facts    []fact
	findings []model.Finding
	threads  []threadRow
	sections []*section
	comments []string
	snap     *model.Snapshot
	a        *stackTable // nil without a profile
	c        *Capture
	// kernel are the capture's kernel contexts; waits the snapshot's
	// waiting threads grouped by what they wait on.
	kernel []*kernelView
	waits  []*waitGroup
}

type fact struct {
	key, value string
	warn       bool // something was lost, cut or unknown
}

type threadRow struct {
	tid           int
	name, state   string
	offCPU, runq  string
	cpu           string // CPU time in the capture's window (during when phased)
	top           string
	waits         string
	rank          int
	offCPUNanos   int64
	unreadableErr string
	// runtimeCode: the thread runs a language runtime's code (a Java
	// thread's Java frames): the program's threads, before the
	// runtime's own that idle beside them.
	runtimeCode bool
}

// section is one ranking of stacks: a sample type in a phase.
type section struct {
	title  string // "On-CPU stacks, during the stall (after the trigger)"
	typ    string
	unit   string
	phase  string
	total  int64
	stacks []*stackTotal // the heaviest, detailStacks of them
	count  int           // distinct stacks with weight
	funcs  []*funcTotal

	// The first screen's stacks. Off-CPU, stacks made only of kernel,
	// libc and runtime code (idle threads parked by their runtime) make
	// way for those in the program's code and are summed up as idle.
	screen     []*stackTotal
	idleTotal  int64
	idleStacks int
}

func buildView(c *Capture) *view {
	v := &view{snap: c.Threads, c: c}
	v.title = titleOf(c)
	v.notes = c.Info.Notes
	v.facts = factsOf(c)
	if t := c.viewTable(); t != nil {
		v.a = analyze(t)
		v.sections = sectionsOf(v.a)
		v.comments = t.p.Comments
	}
	v.threads = threadRows(c, v.a)
	v.findings = c.Info.Findings
	v.kernel = kernelViews(c)
	v.waits = waitGroups(c, v.a)
	if k := c.Info.KernelContext; k != nil {
		v.facts = append(v.facts, fact{key: "kernel", value: kernelSummary(k)})
	}
	return v
}

func titleOf(c *Capture) string {
	in := &c.Info
	if in.PID == 0 && in.Trigger == "" {
		if c.Threads != nil && c.Threads.PID != 0 {
			return fmt.Sprintf("stallwatch thread snapshot of pid %d", c.Threads.PID)
		}
		return "stallwatch profile"
	}
	var sb strings.Builder
	sb.WriteString("stallwatch ")
	if in.Trigger != "" {
		sb.WriteString(strings.ToUpper(clean(string(in.Trigger))) + " capture")
	} else {
		sb.WriteString("capture")
	}
	fmt.Fprintf(&sb, " of pid %d", in.PID)
	if len(in.Command) > 0 {
		fmt.Fprintf(&sb, " (%s)", clean(truncate(strings.Join(in.Command, " "), 80)))
	}
	return sb.String()
}

func factsOf(c *Capture) []fact {
	in := &c.Info
	var f []fact
	add := func(k, v string, warn bool) { f = append(f, fact{k, v, warn}) }
	if in.Trigger != "" {
		s := clean(string(in.Trigger))
		if !in.TriggerAt.IsZero() {
			s += " at " + fmtTime(in.TriggerAt)
		}
		if in.Reason != "" {
			s += " — " + clean(in.Reason)
		}
		if in.Heartbeat != "" {
			s += " (heartbeat: " + clean(in.Heartbeat) + ")"
		}
		if in.Seq > 1 {
			s += fmt.Sprintf(" — capture %d of this stall", in.Seq)
		}
		add("trigger", s, false)
	}
	if s, warn := stallText(in); s != "" {
		add("stall", s, warn)
	}
	if w := windowText(c); w != "" {
		add("window", w, false)
	}
	if in.PID != 0 || in.Trigger != "" {
		n := in.Counts
		s := fmt.Sprintf("%s on-CPU samples, %s off-CPU intervals", fmtCount(int64(n.Samples)), fmtCount(int64(n.OffCPU)))
		if n.SamplesBefore > 0 {
			s += fmt.Sprintf(" (%s from before the trigger)", fmtCount(int64(n.SamplesBefore)))
		}
		s += fmt.Sprintf(", %s, %s", plural(n.Threads, "thread", "threads"), plural(n.JITSources, "JIT source", "JIT sources"))
		add("collected", s, false)
		if n.Lost+n.LostSamples+n.Throttled > 0 {
			add("LOST", fmt.Sprintf("%s perf records, %s samples, %s throttling events: counts and times are lower bounds",
				fmtCount(int64(n.Lost)), fmtCount(int64(n.LostSamples)), fmtCount(int64(n.Throttled))), true)
		} else {
			add("lost", "nothing (0 perf records lost, no throttling)", false)
		}
		var miss []string
		if n.UnreadableThreads > 0 {
			miss = append(miss, plural(n.UnreadableThreads, "thread", "threads")+" unreadable")
		}
		if n.UnsampledThreads > 0 {
			miss = append(miss, plural(n.UnsampledThreads, "thread", "threads")+" not sampled (too few file descriptors: see the notes)")
		}
		if n.MissingSymbols > 0 {
			miss = append(miss, plural(n.MissingSymbols, "mapping", "mappings")+" without symbols")
		}
		if n.JITTruncated > 0 {
			miss = append(miss, plural(n.JITTruncated, "JIT source", "JIT sources")+" truncated")
		}
		if len(miss) > 0 {
			add("missing", strings.Join(miss, ", "), true)
		}
	}
	if in.CutShort {
		why := in.CutShortWhy
		if why == "" {
			why = "reason not recorded"
		}
		add("CUT SHORT", clean(why)+": the files hold what was collected until then", true)
	}
	if in.TargetExited {
		add("TARGET EXITED", "the process exited during the capture", true)
	}
	if in.PID != 0 {
		s := strconv.Itoa(in.PID)
		if in.Executable != "" {
			s += " " + clean(in.Executable)
		}
		if in.Hostname != "" {
			s += " on " + clean(in.Hostname)
		}
		if in.Kernel != "" {
			s += ", kernel " + clean(in.Kernel)
		}
		add("process", s, false)
	}
	if cp := in.Profile; cp != nil && in.Trigger != model.Continuous {
		add("before", continuousText(in, cp), false)
	}
	if st := settingsText(&in.Settings); st != "" {
		add("settings", st, false)
	}
	if in.Version != "" {
		add("stallwatch", clean(in.Version), false)
	}
	for i, n := range in.Notes {
		if i == screenNotes && len(in.Notes) > screenNotes+1 {
			add("note", fmt.Sprintf("… %d more in the details below", len(in.Notes)-i), true)
			break
		}
		add("note", clean(n), true)
	}
	if in.PID == 0 && in.Trigger == "" && c.Profile != nil {
		p := c.Profile
		if p.TimeNanos != 0 {
			add("time", fmtTime(time.Unix(0, p.TimeNanos)), false)
		}
		if p.DurationNanos != 0 {
			add("duration", fmtDur(time.Duration(p.DurationNanos)), false)
		}
		add("sample types", sampleTypesText(p), false)
	}
	return f
}

func stallText(in *model.Info) (string, bool) {
	var parts []string
	if in.StallFor > 0 {
		parts = append(parts, "heartbeat silent for "+fmtDur(in.StallFor)+" at the trigger")
	} else if !in.LastBeat.IsZero() {
		parts = append(parts, "last heartbeat at "+fmtTime(in.LastBeat))
	}
	switch {
	case in.StallLen > 0:
		s := "recovered: the stall lasted " + fmtDur(in.StallLen)
		if !in.Recovered.IsZero() {
			s += " (beats resumed at " + fmtTime(in.Recovered) + ")"
		}
		parts = append(parts, s)
	case !in.Recovered.IsZero():
		parts = append(parts, "recovered at "+fmtTime(in.Recovered))
	case in.Trigger == model.Stall:
		parts = append(parts, "not recovered when this was written")
	}
	return strings.Join(parts, "; "), false
}

func windowText(c *Capture) string {
	in := &c.Info
	if in.Start.IsZero() || in.End.IsZero() {
		return ""
	}
	s := fmt.Sprintf("%s → %s (%s", fmtTime(in.Start), in.End.UTC().Format("15:04:05.000"), fmtDur(in.End.Sub(in.Start)))
	if !in.TriggerAt.IsZero() && in.TriggerAt.After(in.Start) && !in.TriggerAt.After(in.End) {
		s += fmt.Sprintf(": %s before the trigger, %s after", fmtDur(in.TriggerAt.Sub(in.Start)), fmtDur(in.End.Sub(in.TriggerAt)))
	}
	return s + ")"
}

// continuousText says where the continuous profile of the hour before
// the capture is: the command that renders it, and Datadog when its
// periods are uploaded.
func continuousText(in *model.Info, cp *model.ContinuousProfile) string {
	at := in.TriggerAt
	if at.IsZero() {
		at = in.Start
	}
	from := at.Add(-time.Hour)
	if cp.Since.After(from) {
		from = cp.Since
	}
	s := fmt.Sprintf("the continuous profile (periods of %s since %s): stallwatch report %s --from %s --to %s",
		fmtDur(cp.Period), fmtTime(cp.Since), shellWord(clean(cp.Dir)), from.UTC().Format(time.RFC3339), at.UTC().Add(time.Second).Truncate(time.Second).Format(time.RFC3339))
	if cp.Uploaded {
		s += fmt.Sprintf("; in Datadog's profiler too, as process_id:%d", in.PID)
	}
	return s
}

// shellWord quotes s for a shell when it holds anything but the
// characters of plain paths.
func shellWord(s string) string {
	plain := strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%", r))
	}) < 0
	if plain && s != "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func settingsText(s *model.Settings) string {
	var parts []string
	if s.Freq > 0 {
		parts = append(parts, fmt.Sprintf("%d Hz", s.Freq))
	}
	if s.BaselineFreq > 0 {
		parts = append(parts, fmt.Sprintf("baseline %d Hz", s.BaselineFreq))
	}
	if s.History > 0 {
		parts = append(parts, "history "+fmtDur(s.History))
	}
	if s.CaptureFor > 0 {
		parts = append(parts, "capture for "+fmtDur(s.CaptureFor))
	}
	if len(parts) == 0 {
		return ""
	}
	onOff := func(b bool, what string) string {
		if b {
			return what
		}
		return "no " + what
	}
	parts = append(parts, onOff(s.OffCPU, "off-CPU"), onOff(s.Kernel, "kernel stacks"), onOff(s.Ptrace, "ptrace"))
	switch {
	case s.Unwind == "cfi" && s.StackCopyMax > 0:
		parts = append(parts, fmt.Sprintf("CFI unwinding (%d KiB stack copies, growing per thread up to %d KiB)", s.StackCopy>>10, s.StackCopyMax>>10))
	case s.Unwind == "cfi" && s.StackCopy > 0:
		parts = append(parts, fmt.Sprintf("CFI unwinding (%d KiB stack copies)", s.StackCopy>>10))
	case s.Unwind == "fp":
		parts = append(parts, "frame-pointer unwinding")
	}
	return strings.Join(parts, ", ")
}

// sectionsOf ranks stacks: on-CPU and off-CPU, per phase, "during" first.
// A profile without our sample types gets one section of its default.
func sectionsOf(a *stackTable) []*section {
	p := a.p
	if a.t.len() == 0 {
		return nil // a snapshot alone, or a capture cut before any sample
	}
	phases := a.phases()
	phased := len(phases) > 1 || phases[0] != ""
	type kind struct{ typ, title string }
	kinds := []kind{{model.TypeCPUTime, "On-CPU stacks"}, {model.TypeOffCPUTime, "Off-CPU stacks"}}
	if !hasType(p, model.TypeCPUTime) && !hasType(p, model.TypeOffCPUTime) {
		vi, err := valueIndex(p, "")
		if err != nil {
			return nil
		}
		k := kind{p.SampleType[vi].Type, "Stacks by " + clean(p.SampleType[vi].Type)}
		if k.typ == model.TypeThreads {
			k.title = "Thread stacks"
		}
		kinds = []kind{k}
	}
	var out []*section
	for _, ph := range phases {
		for _, k := range kinds {
			vi, err := valueIndex(p, k.typ)
			if err != nil {
				continue
			}
			var keep func(*labelSet) bool
			s := &section{typ: k.typ, unit: p.SampleType[vi].Unit, phase: ph, title: k.title}
			if phased {
				keep = setInPhase(ph)
				s.title += ", " + phaseText(ph)
			}
			var vals []int64
			vals, s.total = a.totals(vi, keep)
			s.stacks, s.count = a.top(vals, detailStacks, vi, keep)
			s.funcs = a.funcs(vals, k.typ == model.TypeOffCPUTime)
			n := screenStacks
			if ph == model.PhaseBefore {
				n = screenStacksBefore // the stall itself comes first
			}
			s.screen = s.stacks[:min(len(s.stacks), n)]
			if k.typ == model.TypeOffCPUTime {
				busy := append([]int64(nil), vals...)
				for id, v := range busy {
					if v != 0 && a.systemOnly(id) {
						s.idleTotal += v
						s.idleStacks++
						busy[id] = 0
					}
				}
				if s.idleTotal > 0 {
					s.screen, _ = a.top(busy, n, vi, keep)
				}
			}
			out = append(out, s)
		}
	}
	return out
}

func phaseText(ph string) string {
	switch ph {
	case model.PhaseDuring:
		return "during the stall (after the trigger)"
	case model.PhaseBefore:
		return "before the trigger (flight recorder)"
	case "":
		return "no phase"
	}
	return "phase " + clean(ph)
}

// threadRows lists the snapshot's threads in dump order, with the CPU time
// each used in the capture (a: the capture's stacks, nil without a
// profile).
func threadRows(c *Capture, a *stackTable) []threadRow {
	snap := c.Threads
	if snap == nil {
		return nil
	}
	cpu := map[string]int64{}
	cpuKnown := false
	if a != nil && hasType(a.p, model.TypeCPUTime) {
		vi, _ := valueIndex(a.p, model.TypeCPUTime)
		var keep func(*labelSet) bool
		if phs := a.phases(); phs[0] == model.PhaseDuring {
			keep = setInPhase(model.PhaseDuring)
		}
		cpu = a.threadTotals(vi, keep)
		cpuKnown = true
	}
	cycle := map[int]bool{}
	for _, cy := range snap.Locks.Cycles {
		for _, tid := range cy {
			cycle[tid] = true
		}
	}
	rows := make([]threadRow, 0, len(snap.Threads))
	for i := range snap.Threads {
		t := &snap.Threads[i]
		r := threadRow{
			tid: t.TID, name: clean(t.Name), state: "?",
			runq: fmtDur(t.RunqueueWait), top: topFrame(t), rank: threadRank(t, cycle),
			unreadableErr: clean(errText(t.Err)),
		}
		if t.State != 0 {
			r.state = string(rune(t.State))
		}
		r.offCPU = "?"
		if t.OffCPUKnown {
			r.offCPU = fmtDur(t.OffCPUFor)
			r.offCPUNanos = int64(t.OffCPUFor)
		} else if t.State == 'R' {
			r.offCPU = "-"
		}
		r.cpu = "-"
		if cpuKnown {
			r.cpu = fmtDur(time.Duration(cpu[strconv.Itoa(t.TID)]))
		}
		r.waits = waitText(t.Wait)
		r.runtimeCode = runsRuntimeCode(t)
		rows = append(rows, r)
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		if a.runtimeCode != b.runtimeCode {
			return a.runtimeCode
		}
		if a.offCPUNanos != b.offCPUNanos {
			return a.offCPUNanos > b.offCPUNanos
		}
		return a.tid < b.tid
	})
	return rows
}

// runsRuntimeCode says whether a thread's stack holds a language
// runtime's frames (Java's, read from the JVM).
func runsRuntimeCode(t *model.Thread) bool {
	for _, l := range t.User {
		if l != nil && l.Mapping != nil && l.Mapping.File == model.JavaMapping {
			return true
		}
	}
	return false
}

// waitText is what the thread table says a thread waits for: the owner
// when one is known, what is waited on when it is more than a bare futex
// (the thread dump has the whole description).
func waitText(w *model.Wait) string {
	switch {
	case w == nil:
		return ""
	case w.Owner != 0:
		return fmt.Sprintf("waits for tid %d", w.Owner)
	case w.Kind == "futex" || w.Desc == "":
		return ""
	}
	return clean(w.Desc)
}
