package analysis

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/internal/textfmt"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes"
)

// maxDeadlocks is how many deadlocks the findings name one by one; more
// are summed up in one finding.
const maxDeadlocks = 3

// Thresholds of the findings, as shares of the judged window (see
// evidence): what counts as "most of the time" does not depend on how long
// the capture was.
const (
	// A thread on a CPU for this share of the window spins.
	spinShare = 0.8
	// A thread off the CPU for this share of the window waits.
	waitShare = 0.8
	// A thread runnable but not running for this share of the window is
	// starved, if it also waited at least as long as it ran.
	starveShare = 0.2
	// Runtime pauses, GIL waits and a blocked event loop are reported
	// from this share of the window, critical from pauseCritical.
	pauseShare    = 0.2
	pauseCritical = 0.5
	// On-CPU time in code no symbol names, past which CPython's
	// half-written jitdump is worth a finding of its own (cpython_jit.go).
	unnamedShare = 0.05
	// A lock is a convoy when this many threads wait for its owner.
	convoyWaiters = 3
)

// finding is a model.Finding with what orders it.
type finding struct {
	model.Finding
	priority int // within a severity, lower is more likely the cause
	weight   float64
}

// Priorities: within one severity, the order in which causes explain a
// stall — a stopped process explains everything, a deadlock explains its
// threads, a runtime pause explains every thread of the runtime, and so on
// down to what only describes where the time went.
var kindPriority = map[model.FindingKind]int{
	model.FindingStopped:           0,
	model.FindingDeadlock:          1,
	model.FindingRuntimePause:      2,
	model.FindingEventLoopBlocked:  3,
	model.FindingGIL:               4,
	model.FindingBlockedOnPeer:     5,
	model.FindingLockConvoy:        6,
	model.FindingOOMKill:           7,
	model.FindingCPUThrottled:      8,
	model.FindingMemoryPressure:    9,
	model.FindingIOPressure:        10,
	model.FindingUninterruptible:   11,
	model.FindingCPUSteal:          12,
	model.FindingCPUStarvation:     13,
	model.FindingSpinning:          14,
	model.FindingHotThread:         15,
	model.FindingMissingJITSymbols: 16,
	model.FindingAllWaiting:        17,
}

// Findings says what stands out in a capture, the most likely cause
// first: each finding with its kind, severity, a sentence, the numbers
// behind it and the threads and functions it names. It reads the capture
// model alone: capture.json's facts (info), the samples as the capture
// stores them (p, nil for a capture without a profile) and the thread
// snapshot (snap, nil for none), so that a capture read back gives the
// findings it was written with.
func Findings(info *model.Info, p *model.Profile, snap *model.Snapshot) []model.Finding {
	return Analyze(info, p, snap).Findings
}

// Analysis is what a capture's analysis draws: its findings, and the
// language runtime its process runs.
type Analysis struct {
	Findings []model.Finding
	Runtime  *runtimes.Runtime // nil: none package runtimes knows
}

// Into records the analysis in capture.json's facts: the findings, and the
// runtime by its ID.
func (a Analysis) Into(info *model.Info) {
	info.Findings, info.Runtime = a.Findings, ""
	if a.Runtime != nil {
		info.Runtime = a.Runtime.ID
	}
}

// Analyze draws a capture's findings and recognises its runtime, from the
// capture model alone (as Findings).
func Analyze(info *model.Info, p *model.Profile, snap *model.Snapshot) Analysis {
	if info == nil {
		info = &model.Info{}
	}
	e := gatherEvidence(info, p, snap)
	var fs []finding
	for _, detect := range []func() []finding{
		e.stopped, e.deadlocks, e.runtimePause, e.eventLoop, e.gil, e.blockedOnPeer, e.convoys,
		e.oomKills, e.cpuThrottled, e.memoryPressure, e.ioPressure, e.uninterruptible, e.steal,
		e.starvation, e.spinningOrHot, e.missingJIT, e.unnamedPythonFrames, e.allWaiting,
	} {
		fs = append(fs, detect()...)
	}
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if ra, rb := a.Severity.Rank(), b.Severity.Rank(); ra != rb {
			return ra < rb
		}
		if a.priority != b.priority {
			return a.priority < b.priority
		}
		return a.weight > b.weight
	})
	out := make([]model.Finding, len(fs))
	for i, f := range fs {
		out[i] = f.Finding
	}
	return Analysis{Findings: out, Runtime: e.rt}
}

func (e *evidence) newFinding(kind model.FindingKind, sev model.Severity, weight float64, tids []int, summary, detail string) finding {
	return finding{
		Finding:  model.Finding{Kind: kind, Severity: sev, Summary: summary, Detail: detail, TIDs: tids},
		priority: kindPriority[kind],
		weight:   weight,
	}
}

// stopped: threads in a job-control stop (T) or a ptrace stop (t). A
// stopped process does nothing at all: it comes first.
func (e *evidence) stopped() []finding {
	if e.snap == nil {
		return nil
	}
	var stopped, traced []int
	tracers := map[int]string{}
	for i := range e.snap.Threads {
		t := &e.snap.Threads[i]
		switch {
		case t.TracerPID != 0:
			traced = append(traced, t.TID)
			tracers[t.TracerPID] = t.Tracer
		case t.State == 'T' || t.State == 't':
			stopped = append(stopped, t.TID)
		}
	}
	all := len(e.snap.Threads)
	var out []finding
	cpuNote := ""
	if e.hasCPU {
		var cpu int64
		for _, t := range e.threads {
			cpu += t.cpu
		}
		cpuNote = fmt.Sprintf(" The process used %s of CPU %s.", textfmt.Dur(time.Duration(cpu)), e.when)
	}
	if len(traced) > 0 {
		var names []string
		for pid, name := range tracers {
			s := fmt.Sprintf("pid %d", pid)
			if name != "" {
				s += " " + textfmt.Quoted(name)
			}
			names = append(names, s)
		}
		sort.Strings(names)
		f := e.newFinding(model.FindingStopped, model.SeverityCritical, float64(len(traced)), traced,
			fmt.Sprintf("STOPPED BY A DEBUGGER: %s of %d traced by %s.", textfmt.Plural(len(traced), "thread", "threads"), all, strings.Join(names, ", ")),
			"A tracer (a debugger, strace, another profiler) holds the threads: while it keeps them in ptrace stops they do not run."+cpuNote+
				" Continue or detach the debugger (gdb: `continue` or `detach`).")
		out = append(out, f)
	}
	if len(stopped) > 0 && (len(stopped)*2 >= all || len(traced) == 0) {
		sev := model.SeverityCritical
		if len(stopped)*2 < all {
			sev = model.SeverityWarning
		}
		summary := fmt.Sprintf("STOPPED: %s of %d in state T (stopped by a signal).", textfmt.Plural(len(stopped), "thread", "threads"), all)
		if len(stopped) == all {
			summary = fmt.Sprintf("STOPPED: the process is stopped (all %d threads in state T): SIGSTOP or job control holds it.", all)
		}
		detail := "A SIGSTOP, SIGTSTP (Ctrl-Z), SIGTTIN or SIGTTOU stopped the process; nothing runs until SIGCONT." + cpuNote +
			fmt.Sprintf(" Resume it with `kill -CONT %d`; find who stopped it (a shell's job control, a supervisor, an OOM handler).", e.snap.PID)
		out = append(out, e.newFinding(model.FindingStopped, sev, float64(len(stopped)), stopped, summary, detail))
	}
	return out
}

// deadlocks: cycles in the snapshot's waits-for graph.
func (e *evidence) deadlocks() []finding {
	if e.snap == nil {
		return nil
	}
	var out []finding
	for i, cy := range e.snap.Locks.Cycles {
		if i == maxDeadlocks && len(e.snap.Locks.Cycles) > maxDeadlocks+1 {
			out = append(out, e.newFinding(model.FindingDeadlock, model.SeverityCritical, 0, nil,
				fmt.Sprintf("… and %d more deadlocks: see the lock graph below.", len(e.snap.Locks.Cycles)-i), ""))
			break
		}
		if len(cy) == 0 {
			continue
		}
		parts := make([]string, 0, len(cy)+1)
		var funcs, holds []string
		java := true // every wait of the cycle is a Java lock: a Java-level deadlock
		for j, tid := range cy {
			parts = append(parts, e.ix.name(tid))
			t := e.ix[tid]
			if t == nil {
				java = false
				continue
			}
			top := textfmt.TopFrame(t)
			if top != "-" && !slices.Contains(funcs, top) {
				funcs = append(funcs, top)
			}
			what := fmt.Sprintf("tid %d", cy[(j+1)%len(cy)])
			if t.Wait != nil && t.Wait.Desc != "" {
				what = textfmt.Clean(t.Wait.Desc)
			}
			java = java && t.Wait != nil && javaLock(t.Wait.Kind)
			if java && top != "-" {
				holds = append(holds, fmt.Sprintf("tid %d waits in %s for %s", tid, top, what))
			} else {
				holds = append(holds, fmt.Sprintf("tid %d waits for %s", tid, what))
			}
			if t.Wait != nil && t.Wait.OwnerSite != "" && !slices.Contains(funcs, t.Wait.OwnerSite) {
				funcs = append(funcs, textfmt.Clean(t.Wait.OwnerSite))
			}
		}
		parts = append(parts, e.ix.name(cy[0]))
		kind := "DEADLOCK"
		if java {
			kind = "Java-level DEADLOCK"
		}
		f := e.newFinding(model.FindingDeadlock, model.SeverityCritical, float64(len(cy)), append([]int(nil), cy...),
			fmt.Sprintf("%s: %s.", kind, strings.Join(parts, " waits for ")),
			strings.Join(holds, "; ")+". None of them can go on: each holds what the next one needs. Take the locks in one global order, or with a timeout.")
		f.Functions = funcNames(funcs)
		out = append(out, f)
	}
	return out
}

// javaLock says whether a wait is for a Java lock (a monitor, a
// java.util.concurrent lock), as the snapshot reads them from a JVM.
func javaLock(kind string) bool { return kind == "java monitor" || kind == "java lock" }

func prefixed(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

// funcNames strips the "(file:line)" topFrame adds.
func funcNames(frames []string) []string {
	var out []string
	for _, f := range frames {
		name, _, _ := strings.Cut(f, " (")
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// runtimePause: a runtime's threads wait for a pause (safepoint,
// stop-the-world, suspension, GC) that one thread runs or that one thread
// holds up by not stopping.
func (e *evidence) runtimePause() []finding {
	if e.a == nil || e.rt == nil || e.rt.Pause == nil {
		return nil
	}
	if f, ok := e.pause(e.rt.Pause); ok {
		return []finding{f}
	}
	return nil
}

func (e *evidence) pause(spec *runtimes.Pause) (finding, bool) {
	// The collector: the thread with the most time stopping the world
	// (collector frames) or working while it is stopped (operation
	// frames without collector frames).
	var collector *threadTime
	var collTime, stopTime, opTime int64
	var waiters []*threadTime
	var waitTime int64
	waited := map[int]int64{}
	for _, t := range e.byCPU() {
		sc, so := e.timeIn(t, spec.Collector)
		oc, oo := e.timeIn(t, spec.Operation)
		both := e.timeInBoth(t, spec.Collector, spec.Operation)
		stop, op := sc+so, oc+oo-both
		if stop+op > collTime {
			collector, collTime, stopTime, opTime = t, stop+op, stop, op
		}
		wc, wo := e.timeIn(t, spec.Waiter)
		if w := wc + wo; w > 0 && e.share(w) >= pauseShare/2 {
			waiters = append(waiters, t)
			waited[t.tid] = w
			waitTime = max(waitTime, w)
		}
	}
	if collector != nil {
		waiters = slices.DeleteFunc(waiters, func(t *threadTime) bool { return t == collector })
	}
	// Threads the snapshot found parked in the pause count too: a pause
	// that began before the window shows there first.
	parked := 0
	if e.snap != nil {
		for i := range e.snap.Threads {
			if t := &e.snap.Threads[i]; e.snapHas(t.TID, spec.Waiter) {
				parked++
			}
		}
	}
	share := max(e.share(collTime), e.share(waitTime))
	if share < pauseShare && parked < 2 {
		return finding{}, false
	}
	if collTime == 0 && len(waiters) == 0 && parked < 2 {
		return finding{}, false
	}
	// The thread that holds the pause up: one that wanted the CPU (ran,
	// or was runnable) most of the window in none of the runtime's
	// pause functions — on a busy host it may have run little of it.
	var culprit *threadTime
	all := slices.Concat(spec.Collector, spec.Operation, spec.Waiter)
	var best int64
	for _, t := range e.byCPU() {
		if t == collector || t.cpu == 0 {
			continue
		}
		c, o := e.timeIn(t, all)
		outside := t.cpu - c
		wanted := outside + max(t.preempted-o, 0)
		if outside > 0 && e.share(wanted) >= spinShare/2 && wanted > best {
			culprit, best = t, wanted
		}
	}
	sev := model.SeverityWarning
	if share >= pauseCritical || parked >= 2 && share >= pauseShare {
		sev = model.SeverityCritical
	}
	var tids []int
	var funcs []string
	var sb strings.Builder
	name := e.rt.String() + " " + spec.What
	summary := ""
	switch {
	case culprit != nil && collector != nil && stopTime >= opTime:
		fn := e.appFrame(topStackOf(culprit.cpuStacks))
		summary = fmt.Sprintf("%s: %s waited %s (%s of the window) for the other threads to stop; %s ran %s without stopping.",
			strings.ToUpper(name[:1])+name[1:], collector.label(), textfmt.Dur(time.Duration(stopTime)), e.pctOf(stopTime), culprit.label(), fn)
		tids = []int{culprit.tid, collector.tid}
		funcs = append(funcs, fn)
		fmt.Fprintf(&sb, "%s %s.", culprit.label(), spec.NotReached)
	case collector != nil:
		op := e.operationName(collector, spec)
		summary = fmt.Sprintf("%s pauses: %s spent %s (%s of the window %s) stopping the threads and running %s.",
			strings.ToUpper(name[:1])+name[1:], collector.label(), textfmt.Dur(time.Duration(collTime)), e.pctOf(collTime), e.when, op)
		tids = []int{collector.tid}
		funcs = append(funcs, op)
	default:
		summary = fmt.Sprintf("%s: %s parked in the %s's pause functions.", strings.ToUpper(name[:1])+name[1:],
			textfmt.Plural(max(len(waiters), parked), "thread", "threads"), e.rt)
	}
	sort.Slice(waiters, func(i, j int) bool { return waited[waiters[i].tid] > waited[waiters[j].tid] })
	if len(waiters) > 0 {
		var ws []string
		for i, t := range waiters {
			if i == 5 {
				ws = append(ws, fmt.Sprintf("%d more", len(waiters)-i))
				break
			}
			ws = append(ws, fmt.Sprintf("%s %s", t.label(), textfmt.Dur(time.Duration(waited[t.tid]))))
			tids = append(tids, t.tid)
		}
		fmt.Fprintf(&sb, " Threads waiting for it %s: %s.", e.when, strings.Join(ws, ", "))
	}
	if parked > 0 {
		fmt.Fprintf(&sb, " At the snapshot %s in %s.", textfmt.Plural(parked, "thread was", "threads were"), strings.Join(spec.Waiter[:min(2, len(spec.Waiter))], " or "))
	}
	fmt.Fprintf(&sb, " %s.", upperFirst(spec.Advice))
	f := e.newFinding(model.FindingRuntimePause, sev, share, tids, summary, strings.TrimSpace(sb.String()))
	f.Runtime = e.rt.ID
	f.Functions = append(funcs, spec.Collector[0])
	return f, true
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func topStackOf(m map[int]int64) int {
	id, _ := topStack(m)
	return id
}

// timeInBoth sums a thread's time in stacks with frames matching both
// pattern lists.
func (e *evidence) timeInBoth(t *threadTime, a, b []string) int64 {
	var sum int64
	for _, m := range []map[int]int64{t.cpuStacks, t.offStacks} {
		for id, v := range m {
			if e.stackHas(id, a) && e.stackHas(id, b) {
				sum += v
			}
		}
	}
	return sum
}

// operationName is the function the collector ran under the operation
// frame (HotSpot's VM_G1CollectFull::doit), or the operation frame when
// that callee is the runtime's plumbing (Go's systemstack).
func (e *evidence) operationName(t *threadTime, spec *runtimes.Pause) string {
	by := map[string]int64{}
	for id, v := range mergeStacks(t.cpuStacks, t.offStacks) {
		fr := e.a.stacks[id]
		for i := len(fr) - 1; i >= 0; i-- {
			if frameMatch(fr[i].Name, spec.Operation) {
				// the callee of the outermost operation frame
				j := i - 1
				for j >= 0 && frameMatch(fr[j].Name, spec.Operation) {
					j--
				}
				name := fr[i].Name
				if j >= 0 && !textfmt.SystemCode(fr[j].Module, fr[j].Name) && fr[j].Kind != model.KindKernel {
					name = fr[j].Name
				}
				by[name] += v
				break
			}
		}
	}
	best, bv := "", int64(-1)
	for n, v := range by {
		if v > bv || (v == bv && n < best) {
			best, bv = n, v
		}
	}
	if best == "" {
		return spec.Operation[0]
	}
	return best
}

func mergeStacks(a, b map[int]int64) map[int]int64 {
	out := make(map[int]int64, len(a)+len(b))
	for k, v := range a {
		out[k] += v
	}
	for k, v := range b {
		out[k] += v
	}
	return out
}

// eventLoop: a Node.js main thread that spent the window on a CPU in
// JavaScript instead of returning to poll for events.
func (e *evidence) eventLoop() []finding {
	if e.a == nil || e.rt != runtimes.Node || !e.hasCPU {
		return nil
	}
	main := e.threads[e.info.PID]
	if main == nil && e.snap != nil {
		main = e.threads[e.snap.PID]
	}
	// On a busy host the loop may have waited for a CPU much of the
	// time: what counts is that it wanted to run (on a CPU or runnable)
	// far more than it slept, not that it ran.
	if main == nil {
		return nil
	}
	wanted := main.cpu + main.preempted
	if main.cpu == 0 || e.share(wanted) < 0.5 || wanted < 3*main.blocked {
		return nil
	}
	// Waiting in epoll is the loop at rest. (JavaScript runs called
	// from uv__io_poll, so only the time blocked in epoll counts.)
	if _, pollO := e.timeIn(main, []string{"epoll_wait", "epoll_pwait"}); e.share(pollO) > 0.2 {
		return nil
	}
	fn := e.heldUnder(main, spinShare, func(f frame) bool { return f.Kind == model.KindJIT && jsFunction(f.Name) })
	unnamed := ""
	if fn == "" {
		var anon int64
		for id, v := range main.cpuStacks {
			for _, f := range e.a.stacks[id] {
				if f.Kind == model.KindUnknown {
					anon += v
					break
				}
			}
		}
		if float64(anon) >= spinShare*float64(main.cpu) {
			fn = "JavaScript"
			unnamed = " (its JIT code has no names: start node with --perf-basic-prof)"
		} else {
			fn = e.appFrame(topStackOf(main.cpuStacks))
		}
	}
	sev := model.SeverityCritical
	summary := fmt.Sprintf("Node.js event loop blocked: the main thread ran %s (on a CPU %s of the window %s, runnable the rest of it %s) without returning to poll for events%s.",
		fn, e.pctOf(main.cpu), e.when, e.pctOf(main.preempted), unnamed)
	detail := fmt.Sprintf("%s stayed on a CPU in synchronous JavaScript: timers, I/O callbacks and incoming requests waited. "+
		"Break the work into chunks (setImmediate), move it to a worker thread (worker_threads), or make it asynchronous; "+
		"--cpu-prof or this report's flame graph shows what inside it costs most.", main.label())
	f := e.newFinding(model.FindingEventLoopBlocked, sev, e.share(main.cpu+main.preempted), []int{main.tid}, summary, detail)
	f.Runtime = runtimes.Node.ID
	if fn != "" && unnamed == "" {
		f.Functions = []string{fn}
	}
	return []finding{f}
}

// jsFunction says whether a JIT frame is a JavaScript function rather
// than one of V8's builtins, stubs or handlers.
func jsFunction(name string) bool {
	for _, p := range []string{"Builtin:", "Stub:", "BytecodeHandler:", "Handler:", "RegExp:", "[", "(anonymous)"} {
		if strings.HasPrefix(name, p) {
			return false
		}
	}
	return true
}

// gil: CPython threads waiting in take_gil while one thread runs.
func (e *evidence) gil() []finding {
	if e.a == nil || e.rt != runtimes.Python {
		return nil
	}
	pats := []string{"take_gil"}
	var waiters []*threadTime
	waited := map[int]int64{}
	var most int64
	for _, t := range e.byCPU() {
		c, o := e.timeInGIL(t)
		if w := c + o; e.share(w) >= pauseShare {
			waiters = append(waiters, t)
			waited[t.tid] = w
			most = max(most, w)
		}
	}
	parked := 0
	owners := map[int]int{} // the GIL's holder, as the threads waiting for it say
	if e.snap != nil {
		for i := range e.snap.Threads {
			th := &e.snap.Threads[i]
			if th.Wait != nil && th.Wait.Kind == "gil" {
				parked++
				if th.Wait.Owner != 0 {
					owners[th.Wait.Owner]++
				}
			} else if e.snapHas(th.TID, pats) {
				parked++
			}
		}
	}
	if len(waiters) == 0 {
		return nil
	}
	// The holder: the busiest thread that waited little for the GIL;
	// with threads taking turns, the one the snapshot found running
	// Python rather than in take_gil.
	var holder *threadTime
	for _, t := range e.byCPU() {
		if _, ok := waited[t.tid]; !ok && t.cpu > 0 {
			holder = t
			break
		}
	}
	if snapHolder := mostOf(owners); snapHolder != 0 {
		// The interpreter's own word (the GIL's holder, read from its
		// memory at the snapshot) over a guess from CPU time.
		for _, t := range e.byCPU() {
			if t.tid == snapHolder {
				holder = t
			}
		}
	}
	if holder == nil && e.snap != nil {
		for _, t := range waiters {
			if st := e.ix[t.tid]; st != nil && !e.snapHas(t.tid, pats) && pythonFunction(st) != "" {
				holder = t
				break
			}
		}
	}
	sort.Slice(waiters, func(i, j int) bool { return waited[waiters[i].tid] > waited[waiters[j].tid] })
	var tids []int
	var ws []string
	for i, t := range waiters {
		if i == 5 {
			ws = append(ws, fmt.Sprintf("%d more", len(waiters)-i))
			break
		}
		ws = append(ws, fmt.Sprintf("%s %s (%s)", t.label(), textfmt.Dur(time.Duration(waited[t.tid])), e.pctOf(waited[t.tid])))
		tids = append(tids, t.tid)
	}
	summary := fmt.Sprintf("GIL contention: %s waited for CPython's global interpreter lock (take_gil) %s",
		textfmt.Plural(len(waiters), "thread", "threads"), e.when)
	var funcs []string
	if holder != nil {
		// Where the snapshot found it (function and line), else where
		// it spent its CPU time.
		fn := pythonFunction(e.ix[holder.tid])
		if fn == "" {
			fn = e.heldUnder(holder, 0.5, func(f frame) bool { return f.Kind == model.KindPython || strings.HasPrefix(f.Name, "py::") })
		}
		if fn == "" {
			fn = e.appFrame(topStackOf(holder.cpuStacks))
		}
		summary += fmt.Sprintf("; %s held it, on a CPU %s of the window in %s", holder.label(), e.pctOf(holder.cpu), fn)
		tids = append([]int{holder.tid}, tids...)
		funcs = append(funcs, fn)
	}
	summary += "."
	detail := "Waiting: " + strings.Join(ws, ", ") + "."
	if parked > 0 {
		detail += fmt.Sprintf(" At the snapshot %s in take_gil.", textfmt.Plural(parked, "thread was", "threads were"))
	}
	detail += " Only one thread runs Python code at a time: CPU-bound Python in threads serializes. Move CPU-bound work to processes (multiprocessing, concurrent.futures.ProcessPoolExecutor) or into native code that releases the GIL."
	sev := model.SeverityWarning
	if e.share(most) >= pauseCritical {
		sev = model.SeverityCritical
	}
	f := e.newFinding(model.FindingGIL, sev, e.share(most), tids, summary, detail)
	f.Runtime = runtimes.Python.ID
	f.Functions = append(funcs, "take_gil")
	return []finding{f}
}

// pythonFunction is the innermost Python function of a thread's snapshot
// stack, with its file and line: read from the interpreter's memory, or
// named by CPython's perf trampolines ("py::function:file", -X perf).
func pythonFunction(t *model.Thread) string {
	if t == nil {
		return ""
	}
	for _, l := range t.User {
		if l == nil {
			continue
		}
		if l.Kind == model.KindPython && len(l.Lines) > 0 {
			return textfmt.LineText(l.Lines[0])
		}
		for _, ln := range l.Lines {
			if strings.HasPrefix(ln.Function, "py::") {
				return textfmt.Clean(ln.Function)
			}
		}
	}
	return ""
}

// mostOf is the key with the largest count (0: none).
func mostOf(m map[int]int) int {
	best, n := 0, 0
	for k, v := range m {
		if v > n || v == n && k < best {
			best, n = k, v
		}
	}
	return best
}

// timeInGIL sums a thread's time waiting for CPython's GIL: in take_gil,
// or — where the interpreter's local symbols are stripped (Debian's
// python3) — on a condition variable the interpreter's own code waits on
// under Python frames, which only the GIL is (Python's locks are
// semaphores).
func (e *evidence) timeInGIL(t *threadTime) (cpu, off int64) {
	wait := func(id int) bool { return e.stackHas(id, []string{"take_gil"}) || gilWaitStack(e.a.stacks[id]) }
	for id, v := range t.cpuStacks {
		if wait(id) {
			cpu += v
		}
	}
	for id, v := range t.offStacks {
		if wait(id) {
			off += v
		}
	}
	return cpu, off
}

// gilWaitStack says whether a stack (innermost first) waits on a
// condition variable called by the interpreter's own code under a Python
// frame.
func gilWaitStack(fr []frame) bool {
	i := 0
	for i < len(fr) && !strings.HasPrefix(fr[i].Name, "pthread_cond_") {
		if fr[i].Kind != model.KindKernel && !textfmt.SystemCode(fr[i].Module, fr[i].Name) {
			return false
		}
		i++
	}
	if i == len(fr) {
		return false
	}
	for i++; i < len(fr) && fr[i].Kind != model.KindPython; i++ {
		if !textfmt.InterpreterCode(fr[i]) {
			return false
		}
	}
	return i < len(fr)
}

// convoys: many threads waiting for a lock one thread holds.
func (e *evidence) convoys() []finding {
	if e.snap == nil {
		return nil
	}
	inCycle := map[int]bool{}
	for _, cy := range e.snap.Locks.Cycles {
		for _, tid := range cy {
			inCycle[tid] = true
		}
	}
	waiters := map[int][]int{}
	for i := range e.snap.Threads {
		t := &e.snap.Threads[i]
		// A join waits for its thread to exit, which holds no lock.
		if t.Wait != nil && t.Wait.Owner != 0 && t.Wait.Kind != "join" && !inCycle[t.Wait.Owner] {
			waiters[t.Wait.Owner] = append(waiters[t.Wait.Owner], t.TID)
		}
	}
	owners := make([]int, 0, len(waiters))
	for o, ws := range waiters {
		if len(ws) >= convoyWaiters {
			owners = append(owners, o)
		}
	}
	sort.Slice(owners, func(i, j int) bool {
		if len(waiters[owners[i]]) != len(waiters[owners[j]]) {
			return len(waiters[owners[i]]) > len(waiters[owners[j]])
		}
		return owners[i] < owners[j]
	})
	var out []finding
	for _, o := range owners {
		ws := waiters[o]
		ot := e.ix[o]
		what := "not in the snapshot"
		var funcs []string
		if ot != nil {
			what = textfmt.Doing(ot)
			if f := textfmt.TopFrame(ot); f != "-" {
				what += " at " + f
				funcs = funcNames([]string{f})
			}
			if t := e.threads[o]; t != nil && e.hasCPU {
				what += fmt.Sprintf("; on a CPU %s of the window", e.pctOf(t.cpu))
			}
		}
		lock := ""
		if w := e.ix[ws[0]]; w != nil && w.Wait != nil {
			lock = w.Wait.Desc
		}
		var names []string
		for i, tid := range ws {
			if i == 5 {
				names = append(names, fmt.Sprintf("%d more", len(ws)-i))
				break
			}
			names = append(names, e.ix.name(tid))
		}
		sev := model.SeverityWarning
		if len(ws)*2 >= len(e.snap.Threads) {
			sev = model.SeverityCritical
		}
		f := e.newFinding(model.FindingLockConvoy, sev, float64(len(ws)), append([]int{o}, ws...),
			fmt.Sprintf("Lock convoy: %d threads wait for %s, which holds the lock they need and is %s.", len(ws), e.ix.name(o), what),
			fmt.Sprintf("Waiting: %s%s. While the owner keeps the lock (in a slow call, on a CPU, or itself blocked) every waiter queues behind it: shorten the critical section, or do the slow part outside the lock.",
				strings.Join(names, ", "), prefixed(" for ", textfmt.Clean(lock))))
		f.Functions = funcs
		out = append(out, f)
	}
	return out
}

// genericWaits are kernel functions every sleep passes through: the
// function that says why is the first one below them.
var genericWaits = []string{"schedule", "__schedule", "schedule_timeout", "io_schedule", "schedule_preempt_disabled",
	"schedule_hrtimeout_range_clock", "schedule_hrtimeout_range", "io_schedule_timeout", "__cond_resched", "preempt_schedule"}

// dWaitMeaning explains the kernel functions D-state waits are known by.
func dWaitMeaning(fn string) string {
	switch {
	case strings.Contains(fn, "vfork"):
		return "the parent of a vfork() waits until its child calls exec or exits"
	case strings.Contains(fn, "fuse"):
		return "a FUSE file system's daemon has not answered"
	case strings.Contains(fn, "nfs") || strings.Contains(fn, "rpc_wait"):
		return "an NFS server has not answered"
	case strings.Contains(fn, "refrigerator") || strings.Contains(fn, "freez"):
		return "its cgroup is frozen (cgroup.freeze)"
	case strings.Contains(fn, "folio") || strings.Contains(fn, "page") || strings.Contains(fn, "blk") || strings.Contains(fn, "bio") || strings.Contains(fn, "io_schedule"):
		return "it waits for disk I/O"
	case strings.Contains(fn, "mutex") || strings.Contains(fn, "rwsem") || strings.Contains(fn, "down_"):
		return "it waits for a kernel lock another task holds"
	}
	return ""
}

// uninterruptible: threads in D state, by the kernel function they wait in.
func (e *evidence) uninterruptible() []finding {
	if e.snap == nil {
		return nil
	}
	byFn := map[string][]*model.Thread{}
	var order []string
	for i := range e.snap.Threads {
		t := &e.snap.Threads[i]
		if t.State != 'D' {
			continue
		}
		fn := kernelWaitFunc(t)
		if sys := kernelSyscall(t); sys != "" {
			fn += " (" + sys + ")"
		}
		if _, ok := byFn[fn]; !ok {
			order = append(order, fn)
		}
		byFn[fn] = append(byFn[fn], t)
	}
	var out []finding
	for _, fn := range order {
		ts := byFn[fn]
		var tids []int
		var names []string
		var longest time.Duration
		known := false
		for _, t := range ts {
			tids = append(tids, t.TID)
			names = append(names, e.ix.name(t.TID))
			if t.OffCPUKnown {
				known = true
				longest = max(longest, t.OffCPUFor)
			}
		}
		sev := model.SeverityWarning
		forText := ""
		if known {
			forText = " for " + textfmt.Dur(longest)
			if e.window > 0 && float64(longest) >= pauseCritical*float64(e.window) {
				sev = model.SeverityCritical
			}
		}
		where := fn
		if where == "" {
			where = "an unknown kernel function"
		}
		summary := fmt.Sprintf("%s in uninterruptible sleep (D) in %s%s: %s.", textfmt.Plural(len(ts), "thread", "threads"), where, forText, textfmt.List(names, 5))
		detail := "A thread in D state cannot be interrupted, not even killed, until the kernel finishes what it waits for"
		if m := dWaitMeaning(fn); m != "" {
			detail += ": " + m
		}
		detail += ". /proc/<pid>/task/<tid>/stack and the thread dump below show the kernel stack."
		f := e.newFinding(model.FindingUninterruptible, sev, float64(longest), tids, summary, detail)
		if fn != "" {
			f.Functions = []string{fn}
		}
		out = append(out, f)
	}
	return out
}

// kernelWaitFunc is the kernel function that says why a thread sleeps: the
// first frame of its kernel stack past the scheduler's, else its wchan.
func kernelWaitFunc(t *model.Thread) string {
	for _, l := range t.Kernel {
		if l == nil || len(l.Lines) == 0 {
			continue
		}
		fn := l.Lines[0].Function
		if fn == "" || slices.Contains(genericWaits, fn) || strings.HasPrefix(fn, "__schedule") || syscallEntry(fn) {
			continue
		}
		return textfmt.Clean(fn)
	}
	return textfmt.Clean(t.Wchan)
}

// kernelSyscall names the system call a kernel stack is in, from its
// entry frame (__x64_sys_vfork, __do_sys_vfork): "vfork()".
func kernelSyscall(t *model.Thread) string {
	for _, l := range t.Kernel {
		if l == nil || len(l.Lines) == 0 {
			continue
		}
		fn := l.Lines[0].Function
		for _, p := range []string{"__x64_sys_", "__do_sys_", "__se_sys_", "__ia32_sys_"} {
			if name, ok := strings.CutPrefix(fn, p); ok && name != "" {
				return textfmt.Clean(name) + "()"
			}
		}
	}
	return ""
}

// syscallEntry says whether a kernel function is the way into every
// system call, which says nothing about the wait.
func syscallEntry(fn string) bool {
	return strings.HasPrefix(fn, "entry_SYSCALL") || strings.HasPrefix(fn, "do_syscall_") ||
		strings.HasPrefix(fn, "__x64_sys_") || strings.HasPrefix(fn, "__do_sys_") || strings.HasPrefix(fn, "x64_sys_call")
}

// starvation: threads runnable but not running for a large share of the
// window, and at least as long as they ran. A thread that ran most of the
// window and waited a little for a CPU now and then is not starved.
func (e *evidence) starvation() []finding {
	if !e.hasOff || e.window <= 0 {
		return nil
	}
	if _, ok := e.throttled(); ok {
		return nil // the quota held them: cpuThrottled says so
	}
	var starved []*threadTime
	var most, procCPU int64
	for _, t := range e.byCPU() {
		procCPU += t.cpu
		if e.share(t.preempted) >= starveShare && t.preempted >= t.cpu {
			starved = append(starved, t)
			most = max(most, t.preempted)
		}
	}
	if len(starved) == 0 {
		return nil
	}
	sort.Slice(starved, func(i, j int) bool { return starved[i].preempted > starved[j].preempted })
	var tids []int
	var ws []string
	for i, t := range starved {
		if i == 5 {
			ws = append(ws, fmt.Sprintf("%d more", len(starved)-i))
			break
		}
		ws = append(ws, fmt.Sprintf("%s waited %s (%s), ran %s", t.label(), textfmt.Dur(time.Duration(t.preempted)), e.pctOf(t.preempted), textfmt.Dur(time.Duration(t.cpu))))
		tids = append(tids, t.tid)
	}
	top := starved[0]
	summary := fmt.Sprintf("CPU starvation: %s runnable but waiting for a CPU for %s or more of the window %s; %s the most, %s (%s).",
		textfmt.Plural(len(starved), "thread was", "threads were"), textfmt.Share(starveShare), e.when, top.label(), textfmt.Dur(time.Duration(top.preempted)), e.pctOf(top.preempted))
	detail := strings.Join(ws, "; ") + "."
	used := float64(procCPU) / float64(e.window)
	detail += fmt.Sprintf(" The process used %.1f CPUs on average.", used)
	// With the kernel's numbers, a cause they rule out (a quota that did
	// not throttle, steal that did not happen) is not suggested.
	kernel := e.starvationCauses()
	quota := "a CPU quota (cgroup cpu.max)"
	if kernel != "" {
		quota = ""
	}
	if h := e.info.Host; h != nil && h.CPUs > 0 {
		detail += fmt.Sprintf(" The host: %d CPUs, load %.2f (1 min), %d tasks runnable at the end of the capture", h.CPUs, h.Load1, h.Running)
		switch {
		case h.Load1 > float64(h.CPUs) && used < 0.8*float64(h.CPUs):
			detail += ": other processes compete for the CPUs; move them, or give this process more CPU (cgroup cpu.weight, nice)."
		case used >= 0.8*float64(h.CPUs):
			detail += ": this process's own threads fill the CPUs; fewer busy threads, or more CPUs."
		default:
			if quota != "" {
				quota += ", "
			}
			detail += "; " + quota + "an affinity mask or a real-time task can starve threads on an idle host."
		}
	} else {
		if quota == "" {
			detail += " A busy host or an affinity mask keeps runnable threads off the CPUs."
		} else {
			detail += " A busy host, " + quota + "or an affinity mask keeps runnable threads off the CPUs."
		}
	}
	if kernel != "" {
		detail += " " + kernel
	}
	sev := model.SeverityWarning
	if e.share(most) >= pauseCritical {
		sev = model.SeverityCritical
	}
	return []finding{e.newFinding(model.FindingCPUStarvation, sev, e.share(most), tids, summary, detail)}
}

// spinningOrHot: one thread on a CPU nearly the whole window while others
// wait (spinning), or one thread with most of the process's CPU time (hot).
func (e *evidence) spinningOrHot() []finding {
	if !e.hasCPU {
		return nil
	}
	ts := e.byCPU()
	if len(ts) == 0 || ts[0].cpu == 0 {
		return nil
	}
	var total int64
	for _, t := range ts {
		total += t.cpu
	}
	spin := ts[0]
	fnID := topStackOf(spin.cpuStacks)
	where := ""
	if fnID >= 0 {
		where = textfmt.StackSummary(e.a.stacks[fnID], 3)
	}
	app := e.appFrame(fnID)
	var waiting []*threadTime
	for _, t := range ts[1:] {
		if e.share(t.blocked) >= waitShare && e.waitsInOwnCode(t) {
			waiting = append(waiting, t)
		}
	}
	if e.window > 0 && e.share(spin.cpu) >= spinShare && len(waiting) > 0 {
		var names []string
		var tids = []int{spin.tid}
		for i, t := range waiting {
			if i == 5 {
				names = append(names, fmt.Sprintf("%d more", len(waiting)-i))
				break
			}
			names = append(names, t.label())
			tids = append(tids, t.tid)
		}
		f := e.newFinding(model.FindingSpinning, model.SeverityWarning, e.share(spin.cpu), tids,
			fmt.Sprintf("%s spun on a CPU %s of the window %s (%s) in %s while %s waited.",
				spin.subject(), e.pctOf(spin.cpu), e.when, textfmt.Dur(time.Duration(spin.cpu)), where, textfmt.Plural(len(waiting), "thread", "threads")),
			fmt.Sprintf("Waiting most of the window: %s. A thread that runs all the time while the others wait is busy-waiting (polling a flag, retrying) or doing work nobody waits for; if it should hand something to them, it never does. %s of all on-CPU time was its.",
				strings.Join(names, ", "), strings.TrimSpace(textfmt.Pct(spin.cpu, total))))
		f.Functions = []string{app}
		return []finding{f}
	}
	if spin.cpu*2 < total {
		return nil
	}
	f := e.newFinding(model.FindingHotThread, model.SeverityInfo, float64(spin.cpu)/float64(total), []int{spin.tid},
		fmt.Sprintf("%s used %s of CPU %s (%s of all on-CPU time) in %s.",
			spin.subject(), textfmt.Dur(time.Duration(spin.cpu)), e.when, strings.TrimSpace(textfmt.Pct(spin.cpu, total)), where),
		fmt.Sprintf("It was on a CPU %s of the window; the flame graph shows where inside %s.", e.pctOf(spin.cpu), app))
	f.Functions = []string{app}
	return []finding{f}
}

// waitsInOwnCode says whether a thread's waits were in the program's code
// (a lock, a read it asked for) rather than a runtime's idle parking.
func (e *evidence) waitsInOwnCode(t *threadTime) bool {
	var own, all int64
	for id, v := range t.offStacks {
		all += v
		if !e.a.systemOnly(id) {
			own += v
		}
	}
	if st := e.ix[t.tid]; st != nil && st.Wait != nil && st.Wait.Owner != 0 {
		return true
	}
	return all > 0 && own*2 >= all
}

// missingJIT: a runtime with a JIT whose compiled code is in stacks
// without names, sampled (on or off the CPU) or in the snapshot: however
// few, since a frame without a name hides what the thread ran.
func (e *evidence) missingJIT() []finding {
	if jitSwitch(e.rt) == "" || e.rt == runtimes.Python && e.info.Counts.JITSources > 0 {
		return nil // CPython with a JIT file read: unnamedPythonFrames says why
	}
	// Unnamed and total time, on the CPU [0] and off it [1].
	var unnamed, total [2]int64
	if e.a != nil {
		for i := range e.p.Samples {
			s := &e.p.Samples[i]
			k := 0
			if s.OffCPU {
				k = 1
			}
			total[k] += s.Nanos
			for _, f := range e.a.stacks[e.a.stackOf[i]] {
				if f.Kind == model.KindUnknown && (strings.HasPrefix(f.Name, "[anon]") || strings.HasPrefix(f.Name, "[unknown]")) {
					unnamed[k] += s.Nanos
					break
				}
			}
		}
	}
	var tids []int
	if e.snap != nil {
		for i := range e.snap.Threads {
			if unnamedJIT(e.snap.Threads[i].User) {
				tids = append(tids, e.snap.Threads[i].TID)
			}
		}
	}
	if unnamed[0] == 0 && unnamed[1] == 0 && len(tids) == 0 {
		return nil
	}
	var where []string
	for k, what := range []string{"of the on-CPU time", "of the off-CPU time"} {
		if unnamed[k] > 0 && unnamed[k]*1000 >= total[k] { // a share that prints as 0.0% says nothing
			where = append(where, strings.TrimSpace(textfmt.Pct(unnamed[k], total[k]))+" "+what)
		}
	}
	if len(tids) > 0 {
		where = append(where, fmt.Sprintf("%s at the snapshot", textfmt.Plural(len(tids), "thread's stack", "threads' stacks")))
	}
	srcs := "no JIT symbol file was found"
	if n := e.info.Counts.JITSources; n > 0 {
		srcs = fmt.Sprintf("the %s read do not name it", textfmt.Plural(n, "JIT symbol source", "JIT symbol sources"))
	}
	weight := float64(len(tids))
	if total[0] > 0 {
		weight += float64(unnamed[0]) / float64(total[0])
	}
	advice := "To name it, " + jitSwitch(e.rt) + "."
	if e.info.Counts.JITSources > 0 {
		advice = "The runtime's own names were read (capture.json's notes say from where) and do not cover this code: " +
			"code compiled, moved or freed after they were written, or a stub the runtime does not name."
	}
	f := e.newFinding(model.FindingMissingJITSymbols, model.SeverityInfo, weight, tids,
		fmt.Sprintf("%s JIT code without names: %s ran in compiled code no symbol names (%s).",
			e.rt, andList(where), srcs), advice)
	f.Runtime = e.rt.ID
	return []finding{f}
}

// andList joins "a", "b" and "c" as a sentence does.
func andList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// unnamedJIT says whether a stack runs through anonymous executable
// memory (a JIT's code) that nothing names.
func unnamedJIT(stack []*model.Location) bool {
	for _, l := range stack {
		if l != nil && l.Kind == model.KindUnknown && strings.HasPrefix(l.Name(), "[anon]") {
			return true
		}
	}
	return false
}

// allWaiting: nothing ran.
func (e *evidence) allWaiting() []finding {
	if !e.hasCPU || !e.hasOff {
		return nil
	}
	var cpu, off int64
	for _, t := range e.threads {
		cpu += t.cpu
		off += t.blocked + t.preempted
	}
	if cpu != 0 || off == 0 {
		return nil
	}
	detail, funcs := e.waitsText()
	f := e.newFinding(model.FindingAllWaiting, model.SeverityInfo, 0, nil,
		fmt.Sprintf("No thread ran on a CPU %s: the process is waiting, not busy; see the off-CPU stacks and the thread table.", e.when), detail)
	f.Functions = funcs
	return []finding{f}
}

// waitsText says where the threads that waited longest wait: the
// function of the program's own code (a Python function, with its line,
// where the stack has Python frames) and the call it waits in.
func (e *evidence) waitsText() (string, []string) {
	ts := make([]*threadTime, 0, len(e.threads))
	for _, t := range e.threads {
		ts = append(ts, t)
	}
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].blocked != ts[j].blocked {
			return ts[i].blocked > ts[j].blocked
		}
		return ts[i].tid < ts[j].tid
	})
	var parts, funcs []string
	for _, t := range ts {
		if len(parts) == 3 || t.blocked == 0 {
			break
		}
		id, _ := topStack(t.offStacks)
		if id < 0 {
			continue
		}
		fr := e.a.stacks[id]
		if textfmt.SystemOnly(fr) {
			continue // only the runtime's or libc's frames: the thread table has them
		}
		site := e.a.waitSite(id)
		text := frameLabel(fr[site])
		if call := userTop(fr); call >= 0 && call < site {
			text += " under " + fr[call].Name
		}
		parts = append(parts, fmt.Sprintf("%s waits in %s", t.label(), text))
		funcs = append(funcs, fr[site].Name)
	}
	if len(parts) == 0 {
		return "", nil
	}
	return strings.Join(parts, "; ") + ".", funcs
}

// frameLabel is a frame as a finding names it: a Python function with
// its file and line.
func frameLabel(f frame) string {
	if f.Kind == model.KindPython && f.Line > 0 {
		return fmt.Sprintf("%s (%s:%d)", f.Name, f.File, f.Line)
	}
	return f.Name
}

// userTop is the innermost user frame of a stack (the call a thread
// waits in: read, futex wait); -1 when it has none.
func userTop(fr []frame) int {
	for i, f := range fr {
		if f.Kind != model.KindKernel {
			return i
		}
	}
	return -1
}
