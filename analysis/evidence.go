package analysis

import (
	"sort"
	"strconv"
	"strings"

	"github.com/stallwatch/stallwatch/internal/textfmt"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes"
)

// evidence is what the findings are drawn from, worked out once per
// capture: the window they judge, each thread's time in it (on a CPU,
// blocked, runnable but waiting), where that time went, and the snapshot.
// Every threshold a finding uses is a share of the window, so that a
// 3-second capture and a 60-second one are judged alike.
type evidence struct {
	info *model.Info
	a    *stackTable // nil without a profile
	p    *model.Profile
	snap *model.Snapshot
	ix   threadIndex

	phase  string // the phase judged: "during" when there are phases
	when   string // "during the stall", "in the capture"
	window int64  // its length in ns; 0 when unknown
	hasCPU bool   // the profile has on-CPU time
	hasOff bool   // and off-CPU time

	threads map[int]*threadTime
	rt      *runtimes.Runtime // nil: none known
}

// threadTime is one thread's time in the judged window.
type threadTime struct {
	tid                     int
	name                    string
	cpu, blocked, preempted int64
	cpuStacks, offStacks    map[int]int64 // analysis stack id → ns
}

// subject names the thread at the start of a sentence: `Thread 12 "worker"`.
func (t *threadTime) subject() string {
	return "Thread" + strings.TrimPrefix(t.label(), "tid")
}

func (t *threadTime) label() string {
	if t.name != "" {
		return "tid " + strconv.Itoa(t.tid) + " " + textfmt.Quoted(t.name)
	}
	return "tid " + strconv.Itoa(t.tid)
}

func gatherEvidence(info *model.Info, p *model.Profile, snap *model.Snapshot) *evidence {
	e := &evidence{info: info, p: p, snap: snap, threads: map[int]*threadTime{}}
	if e.snap != nil {
		e.ix = e.snap.ByTID()
	}
	e.when = "in the capture"
	if p != nil {
		e.a = readStacks(p)
		e.phase = judgedPhase(p)
		if e.phase == model.PhaseDuring {
			e.when = "during the stall"
		}
		e.hasCPU = p.OnCPU
		e.hasOff = p.OffCPU
		e.sumThreads()
	}
	e.window = e.windowNanos()
	e.rt = detectRuntime(info, p, snap, e.a)
	return e
}

// thread returns the thread's record, made on first use.
func (e *evidence) thread(tid int) *threadTime {
	t := e.threads[tid]
	if t == nil {
		t = &threadTime{tid: tid, cpuStacks: map[int]int64{}, offStacks: map[int]int64{}}
		if st := e.ix[tid]; st != nil {
			t.name = st.Name
		}
		e.threads[tid] = t
	}
	return t
}

func (e *evidence) sumThreads() {
	for i := range e.p.Samples {
		s := &e.p.Samples[i]
		if s.Phase != e.phase || s.TID == 0 {
			continue
		}
		t := e.thread(s.TID)
		if s.ThreadName != "" && t.name == "" {
			t.name = s.ThreadName
		}
		id, v := e.a.stackOf[i], s.Nanos
		switch {
		case v <= 0:
		case !s.OffCPU && e.hasCPU:
			t.cpu += v
			t.cpuStacks[id] += v
		case s.OffCPU && e.hasOff:
			if s.Preempted {
				t.preempted += v
			} else {
				t.blocked += v
			}
			t.offStacks[id] += v
		}
	}
}

// windowNanos is the length of the judged window: from the trigger to the
// end when judging "during", the whole capture otherwise; failing those,
// the span of the samples' timestamps, or the longest thread's time.
func (e *evidence) windowNanos() int64 {
	in := e.info
	switch {
	case e.phase == model.PhaseDuring && !in.TriggerAt.IsZero() && in.End.After(in.TriggerAt):
		return int64(in.End.Sub(in.TriggerAt))
	case e.phase == "" && !in.Start.IsZero() && in.End.After(in.Start):
		return int64(in.End.Sub(in.Start))
	case e.phase == "" && e.p != nil && e.p.Duration > 0:
		return int64(e.p.Duration)
	}
	if e.p != nil {
		if span := e.phaseSpan(); span.End > span.Start {
			return span.End - span.Start
		}
	}
	var longest int64
	for _, t := range e.threads {
		longest = max(longest, t.cpu+t.blocked+t.preempted)
	}
	return longest
}

// phaseSpan is the span of the judged phase's sample times: the
// profile's, for samples added together without their times, else read
// from the samples.
func (e *evidence) phaseSpan() model.Span {
	if e.p.Spans != nil {
		return e.p.Spans[e.phase]
	}
	var span model.Span
	for i := range e.p.Samples {
		if s := &e.p.Samples[i]; s.Phase == e.phase && s.EndNanos != 0 {
			span.Add(s.EndNanos, s.Nanos)
		}
	}
	return span
}

// threadIndex finds the snapshot's threads by tid.
type threadIndex map[int]*model.Thread

// name is how a sentence names a thread: `tid 12 "worker"`.
func (ix threadIndex) name(tid int) string { return textfmt.ThreadLabel(tid, ix[tid]) }

// share is v as a fraction of the window (0 when the window is unknown).
func (e *evidence) share(v int64) float64 {
	if e.window <= 0 {
		return 0
	}
	return float64(v) / float64(e.window)
}

// pctOf prints v as a percentage of the window: "62%".
func (e *evidence) pctOf(v int64) string {
	return textfmt.Share(e.share(v))
}

// byCPU lists the threads, most CPU first.
func (e *evidence) byCPU() []*threadTime {
	out := make([]*threadTime, 0, len(e.threads))
	for _, t := range e.threads {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].cpu != out[j].cpu {
			return out[i].cpu > out[j].cpu
		}
		return out[i].tid < out[j].tid
	})
	return out
}

// frameMatch says whether a function name matches one of pats: a pattern
// matches a name that contains it (C++ names carry classes, arguments and
// namespaces around the part that matters).
func frameMatch(name string, pats []string) bool {
	for _, p := range pats {
		if strings.Contains(name, p) {
			return true
		}
	}
	return false
}

// stackHas says whether analysis stack id has a frame matching pats.
func (e *evidence) stackHas(id int, pats []string) bool {
	for _, f := range e.a.stacks[id] {
		if frameMatch(f.Name, pats) {
			return true
		}
	}
	return false
}

// timeIn sums a thread's on- and off-CPU time in stacks that have a frame
// matching pats.
func (e *evidence) timeIn(t *threadTime, pats []string) (cpu, off int64) {
	for id, v := range t.cpuStacks {
		if e.stackHas(id, pats) {
			cpu += v
		}
	}
	for id, v := range t.offStacks {
		if e.stackHas(id, pats) {
			off += v
		}
	}
	return cpu, off
}

// snapHas says whether the snapshot's stack of a thread has a frame
// matching pats.
func (e *evidence) snapHas(tid int, pats []string) bool {
	st := e.ix[tid]
	if st == nil {
		return false
	}
	for _, stack := range [][]*model.Location{st.User, st.Kernel} {
		for _, l := range stack {
			if l == nil {
				continue
			}
			for _, ln := range l.Lines {
				if frameMatch(ln.Function, pats) {
					return true
				}
			}
		}
	}
	return false
}

// topStack is the heaviest stack of a thread's on-CPU (or off-CPU) time.
func topStack(m map[int]int64) (int, int64) {
	best, bv := -1, int64(0)
	for id, v := range m {
		if v > bv || (v == bv && id < best) {
			best, bv = id, v
		}
	}
	return best, bv
}

// appFrame is the frame of the program's own code nearest the top of a
// stack: what a person calls "where it is" (past kernel, libc and runtime
// wrappers); the top frame when there is none.
func (e *evidence) appFrame(id int) string {
	if id < 0 {
		return ""
	}
	fr := e.a.stacks[id]
	if len(fr) == 0 {
		return ""
	}
	return fr[e.a.waitSite(id)].Name
}

// heldUnder finds the deepest frame under which at least frac of a
// thread's on-CPU time fell, among frames that pass ok: the function that
// did not return. The empty string when none passes.
func (e *evidence) heldUnder(t *threadTime, frac float64, ok func(frame) bool) string {
	if t.cpu == 0 {
		return ""
	}
	cum := map[string]int64{}
	depth := map[string]int{}
	seen := map[string]bool{}
	for id, v := range t.cpuStacks {
		clear(seen)
		fr := e.a.stacks[id]
		for i, f := range fr {
			if !ok(f) || seen[f.Name] {
				continue
			}
			seen[f.Name] = true
			cum[f.Name] += v
			// depth from the root: deeper callees have larger depth
			if d := len(fr) - i; d > depth[f.Name] {
				depth[f.Name] = d
			}
		}
	}
	best, bd := "", -1
	for name, v := range cum {
		if float64(v) < frac*float64(t.cpu) {
			continue
		}
		if d := depth[name]; d > bd || (d == bd && name < best) {
			best, bd = name, d
		}
	}
	return best
}
