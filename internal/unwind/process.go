package unwind

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/callframe"
	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/procfs"
)

// MaxFrames is the depth walks go to unless told otherwise: a deep
// recursion (hundreds of frames) is shown whole.
const MaxFrames = 1024

// Process unwinds the threads of one target over its address space: CFI
// for every mapped ELF file that has it, a Go binary's pclntab for its Go
// code, frame pointers for code without either. The tables of every
// module are read when the Process is made and at each Refresh, never
// during a walk (a walk may run while a thread is stopped). It is safe
// for concurrent use.
type Process struct {
	space *addrspace.Space

	mu       sync.RWMutex
	cur      []codeRange // current executable mappings, sorted by start
	gone     []codeRange // mappings gone since, for code that ran before
	known    map[*addrspace.Module]codeRange
	problems []string
	jit      JITCode
	// gen is the layout generation: each Refresh starts a new one, and
	// the rule cache's entries of older ones no longer match.
	gen uint64

	rules   *ruleCache
	funcs   atomic.Pointer[funcCache] // functions' extents, for the callers' checks; made at first use
	noRules atomic.Bool               // SetRuleCache(false): neither

	raMu   sync.Mutex
	front  atomic.Pointer[edgeFrontTable] // the verdicts looked up last
	exact  atomic.Pointer[exactEdgeTable] // the verdicts looked up last, by the frames' addresses
	edges  map[edgeKey]*keptEdge          // callers checked against their call sites
	sweeps map[uint64]*branches           // call targets' code, by entry
}

// NewProcess prepares to unwind the threads of the target of space.
func NewProcess(space *addrspace.Space) *Process {
	p := &Process{space: space, known: map[*addrspace.Module]codeRange{}, edges: map[edgeKey]*keptEdge{}, rules: new(ruleCache)}
	p.Refresh()
	return p
}

// Refresh takes in the modules the space gained since (call it after
// the space's own Refresh). Tables already read are not read again, and
// a layout that did not change keeps its generation (the rule cache's
// entries stay good).
func (p *Process) Refresh() {
	var cur, gone []codeRange
	var problems []string
	p.mu.RLock()
	known, nCur, nGone := p.known, len(p.cur), len(p.gone)
	p.mu.RUnlock()
	mods := p.space.Modules()
	if unchanged(mods, known, nCur, nGone) {
		return
	}
	fresh := map[*addrspace.Module]codeRange{}
	for _, m := range mods {
		cr, ok := known[m]
		if !ok {
			cr = codeRangeOf(m)
		}
		fresh[m] = cr
		if cr.problem != "" {
			problems = append(problems, cr.problem)
		}
		if m.Gone {
			gone = append(gone, cr)
		} else {
			cur = append(cur, cr)
		}
	}
	sort.Slice(cur, func(i, j int) bool { return cur[i].start < cur[j].start })
	p.mu.Lock()
	p.cur, p.gone, p.known, p.problems = cur, gone, fresh, problems
	p.gen++
	p.mu.Unlock()
}

// unchanged reports whether mods are the modules the layout was made of:
// each known, as many current and gone as then (a module's Gone is set
// once, when it moves from the current to the gone).
func unchanged(mods []*addrspace.Module, known map[*addrspace.Module]codeRange, nCur, nGone int) bool {
	if len(mods) != len(known) {
		return false
	}
	gone := 0
	for _, m := range mods {
		if _, ok := known[m]; !ok {
			return false
		}
		if m.Gone {
			gone++
		}
	}
	return gone == nGone && len(mods)-gone == nCur
}

// codeRangeOf reads a module's unwind tables.
func codeRangeOf(m *addrspace.Module) codeRange {
	cr := codeRange{start: m.Start, end: m.End, bias: m.Bias, name: m.Name(), anon: m.Anon}
	if m.File == nil {
		// A file that is not ELF is no code a linker made (a jitdump
		// mapped so that perf sees it): nothing to unwind with.
		if m.Err != nil && m.IsFile() && !errors.Is(m.Err, objfile.ErrNotELF) {
			cr.problem = fmt.Sprintf("%s: no call frame information (%v); frame pointers used", m.Path, m.Err)
		}
		return cr
	}
	if _, ok := m.File.Bias(m.Start, m.Offset, m.Exec()); !ok {
		cr.problem = fmt.Sprintf("%s: mapping at offset %#x matches no loadable segment; frame pointers used", m.Path, m.Offset)
		return cr
	}
	var problems []string
	if g, err := m.File.Go(); err != nil {
		problems = append(problems, fmt.Sprintf("%v; frame pointers used for its Go code", err))
	} else if g != nil {
		cr.gotab = g
		if rt, err := m.File.GoRuntime(); err == nil {
			cr.gort = rt
		}
	}
	cfi, err := m.File.CFI()
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("%s: no call frame information (%v); frame pointers used", m.Path, err))
	case cfi != nil:
		cr.cfi = cfi
		if cfi.Bad > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d malformed FDEs skipped", m.Path, cfi.Bad))
		}
	}
	cr.problem = strings.Join(problems, "; ")
	return cr
}

// Problems lists the modules whose code is unwound by frame pointers
// because their call frame information is missing or unusable, and why.
func (p *Process) Problems() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return append([]string(nil), p.problems...)
}

func (p *Process) lookup(pc uint64) *codeRange {
	p.mu.RLock()
	defer p.mu.RUnlock()
	i := sort.Search(len(p.cur), func(i int) bool { return p.cur[i].end > pc })
	if i < len(p.cur) && pc >= p.cur[i].start {
		return &p.cur[i]
	}
	for i := range p.gone {
		if pc >= p.gone[i].start && pc < p.gone[i].end {
			return &p.gone[i]
		}
	}
	return nil
}

// Unwind walks a stack with CFI where the code has it and frame pointers
// elsewhere. The result starts with regs.IP.
func (p *Process) Unwind(regs Regs, mem Memory, max int) []uint64 {
	return p.UnwindTrace(regs, mem, max).PCs
}

// UnwindTrace is Unwind, saying how each frame was found and why the walk
// ended.
func (p *Process) UnwindTrace(regs Regs, mem Memory, max int) Trace {
	w := p.walker(mem, 0)
	return w.walk(regs, max)
}

// walker is a walk of this process's stacks reading mem, of a sample
// taken at t (0: now).
func (p *Process) walker(mem Memory, t uint64) walker {
	p.mu.RLock()
	j, gen := p.jit, p.gen
	p.mu.RUnlock()
	w := walker{proc: p, mem: mem, code: p.space.Memory(), jit: j, gen: gen, t: t}
	if j != nil {
		w.jitGen = j.Generation(t)
	}
	if !p.noRules.Load() {
		w.rules, w.funcs = p.rules, p.funcCache()
	}
	return w
}

// funcCache is the Process's cache of functions' extents, made at its
// first use.
func (p *Process) funcCache() *funcCache {
	if c := p.funcs.Load(); c != nil {
		return c
	}
	p.funcs.CompareAndSwap(nil, new(funcCache))
	return p.funcs.Load()
}

// SetRuleCache turns the cache of per-address unwind rules on (the
// default) or off, and with it the caches of what JIT code says of its
// callers (its functions' extents, the verdicts on its call sites). Off,
// every frame is looked up in the mappings and its module's tables, and
// every caller in or into JIT code is checked against the code read
// anew: the reference the caches are tested and measured against.
// Stacks are the same either way.
func (p *Process) SetRuleCache(on bool) { p.noRules.Store(!on) }

// SetJIT gives the unwind rules of the target's JIT code (package target
// sets it from the target's jitdumps).
func (p *Process) SetJIT(j JITCode) {
	p.mu.Lock()
	p.jit = j
	p.mu.Unlock()
}

// ErrRunning is returned by BlockedStack for a thread that is on a CPU:
// its registers are live, not saved where /proc can show them.
var ErrRunning = errors.New("thread is running in user space; its registers are not saved")

// BlockedStack unwinds a thread blocked in the kernel without stopping
// it: the stack and instruction pointers are those /proc shows in
// task/<tid>/syscall, the stack is read with process_vm_readv (it does not
// change while the thread is blocked), and frames are unwound with CFI.
// Where a frame needs the frame pointer, which /proc does not show, the
// stack is scanned for a saved frame pointer and return address pair
// (Trace.How says Scanned).
func (p *Process) BlockedStack(tid int) ([]uint64, Cut, error) {
	t, err := p.BlockedTrace(tid, MaxFrames)
	return t.PCs, t.Cut, err
}

// BlockedTrace is BlockedStack, saying how each frame was found.
func (p *Process) BlockedTrace(tid int, max int) (Trace, error) {
	sc, err := procfs.ReadSyscall(p.space.Pid(), tid)
	if err != nil {
		return Trace{}, fmt.Errorf("unwind: syscall of thread %d: %w", tid, err)
	}
	if sc.Running {
		return Trace{}, ErrRunning
	}
	if sc.PC == 0 || sc.SP == 0 {
		return Trace{}, fmt.Errorf("unwind: thread %d: no user registers in /proc (a kernel thread?)", tid)
	}
	w := p.walker(p.space.Memory(), 0)
	w.scan = true
	return w.walk(Regs{IP: sc.PC, SP: sc.SP}, max), nil
}

// Sample is what a perf sample carries to unwind its user stack: the user
// registers at the sample, the copy of the stack taken from regs.SP
// (PERF_SAMPLE_STACK_USER) and the kernel's own frame-pointer walk of the
// user stack (the callchain: the sampled IP, then return addresses).
type Sample struct {
	Regs  Regs
	Stack []byte
	// Asked is the size of the copy asked of the kernel: it copies less
	// (len(Stack)) where the stack's next page is not resident or the
	// stack ends.
	Asked int
	FP    []uint64
	// Time is the sample's CLOCK_MONOTONIC time: the JIT code live then.
	Time uint64
}

// UnwindSample returns the user stack of a sample, innermost first,
// appended to dst, and why it ends. Frames inside the stack copy are
// unwound with call frame information, Go frame sizes and frame pointers
// (in that order of preference, per frame); beyond the copy the walk
// joins the kernel's frame-pointer chain at the frame record both reached
// (join), and takes each of its return addresses only where the code
// proves it (verify.go): bytes of the stack are never taken for frames.
// With no copy at all the kernel's chain is the walk. The walk ends with a
// Cut saying why when it could go no further before the thread's first
// function.
//
// Every address but the first is taken for a return address, named by
// the call before it. A frame a signal interrupted is not one: its pc is
// the instruction to run next, which may be a function's first. It is
// given as pc+1, as Go's runtime gives the frame a sigpanic interrupted,
// so that naming pc+1-1 names the function interrupted.
func (p *Process) UnwindSample(smp Sample, max int, dst []uint64) ([]uint64, Cut) {
	out := dst
	if max <= 0 {
		return out, Cut{Reason: TooDeep, Limit: max}
	}
	w := p.walker(nil, smp.Time)
	w.stack, w.onStack = dumpMemory{base: smp.Regs.SP, b: smp.Stack}, true
	w.copySize, w.asked = len(smp.Stack), smp.Asked
	if len(smp.Stack) == 0 {
		if len(smp.FP) == 0 {
			return out, Cut{Reason: Unreadable}
		}
		out = append(out, smp.FP[0])
		return w.follow(out, 1, smp.FP[1:], smp.FP[0], true, max)
	}
	s := newFrameState(smp.Regs)
	out = append(out, smp.Regs.IP)
	n := 1
	for n < max {
		below, exact := s.ip(), s.exact
		var res stepResult
		if cfa, how, ok := w.warmStep(&s); ok {
			res = stepResult{how: how, cfa: cfa}
		} else if res = w.step(&s); res.end {
			if !res.cut.Truncated() {
				return out, Cut{}
			}
			return w.join(&s, out, n, res.cut, smp, max)
		}
		if !w.executable(s.ip(), res.signal) {
			return out, Cut{Reason: NotExecutable, PC: s.ip()}
		}
		var missing uint64
		if w.guessed || res.how != CFI {
			m, cut := w.verify(&res, below, exact, s.ip())
			if cut.Truncated() {
				return out, cut
			}
			missing = m
		} else {
			// What verify does for a frame by exact rules with no
			// guess below it: note the frame returned from.
			if !exact {
				below--
			}
			w.under = below
		}
		if missing != 0 && n+1 < max {
			out = append(out, missing)
			n++
		}
		out = append(out, callerPC(s.ip(), res.signal))
		n++
	}
	return out, Cut{Reason: TooDeep, Limit: max}
}

// join goes on from a walk of the stack copy cut at frame n (out holds
// its frames, the last n of them this walk's; s is the frame it could
// not unwind) with the kernel's frame-pointer chain. The kernel followed
// the chain from the sample's frame pointer: its return address i+1 is
// the one saved beside the frame record i links to. The walk's frame
// pointer, when it is one of those records, says where the walk is on
// the kernel's chain (the records the copy holds are read, and the first
// beyond it too, which the last one inside names). Nothing else joins:
// a return address both walks found may stand at other depths of each.
func (w *walker) join(s *frameState, out []uint64, n int, cut Cut, smp Sample, max int) ([]uint64, Cut) {
	bp, ok := s.regs.Get(callframe.RegRBP)
	if !ok || !smp.Regs.BPKnown || len(smp.FP) < 2 {
		return out, cut
	}
	rec := smp.Regs.BP
	for i := 0; i+1 < len(smp.FP) && i < max; i++ {
		// No climbing is asked of the records: the kernel does not ask
		// it either, and a Go system stack's chain goes on on the
		// goroutine's stack.
		if rec == bp {
			more, end := w.follow(out, n, smp.FP[i+1:], s.ip(), s.exact, max)
			if cut.Reason == CopyExhausted && end.Reason == NoUnwindInfo {
				// Where the chain ends is frame pointers' limit
				// (code that has CFI but keeps no frame pointer);
				// the copy's end is why the walk needed them, and
				// a larger copy is the fix.
				end = cut
			}
			return more, end
		}
		next, err := w.stack.word(rec)
		if err != nil {
			break
		}
		rec = next
	}
	return out, cut
}

// follow appends the return addresses of the kernel's frame-pointer chain
// fp to out (n frames are this walk's already; below is the pc of the
// last, exact when it is not a return address), each one only where its
// call site proves it the caller of the frame below (verify.go), putting
// back a frame the chain skipped where the code says which it is. A Go
// goroutine's chain ends at runtime.goexit's planted return address; a
// Go system stack's chain ends where mcall or morestack zeroed the frame
// pointer, and goes on at the bottom of the thread's system stack
// (objfile.GoRuntime).
func (w *walker) follow(out []uint64, n int, fp []uint64, below uint64, exact bool, max int) ([]uint64, Cut) {
	w.guessed = true
	for _, ra := range fp {
		if n >= max {
			return out, Cut{Reason: TooDeep, Limit: max}
		}
		if !exact {
			below--
		}
		if w.goOutermost(ra) {
			return append(out, ra), Cut{}
		}
		under := w.under
		w.under = below
		e := w.checkEdge(ra, below, under)
		switch e.verdict {
		case edgeOK:
		case edgeMissing:
			if n+1 >= max {
				return out, Cut{Reason: TooDeep, Limit: max}
			}
			out = append(out, e.missing)
			n++
		default:
			return out, edgeCut(e, ra)
		}
		out = append(out, ra)
		n++
		below, exact = ra, false
		if w.atG0Switch(ra) {
			// Where the chain goes on past mcall or morestack (Go
			// before 1.21 left the frame pointer), it leaves the
			// system stack for the goroutine's: the stack's own
			// bottom is what follows.
			break
		}
	}
	return w.chainEnd(out, n, below, exact, max)
}

// atG0Switch reports whether ra is a return address in mcall or
// morestack.
func (w *walker) atG0Switch(ra uint64) bool {
	cr := w.find(ra - 1)
	if cr == nil || cr.gotab == nil {
		return false
	}
	_, ok := g0Switch(cr, ra-1-cr.bias)
	return ok
}

// goOutermost reports whether ra is in a Go stack's first function
// (runtime.goexit, whose planted return address follows no call, mstart,
// rt0_go).
func (w *walker) goOutermost(ra uint64) bool {
	cr := w.find(ra - 1)
	return cr != nil && cr.gotab != nil && cr.gotab.FrameKind(ra-1-cr.bias) == objfile.GoOutermost
}

// chainEnd says why a frame-pointer chain ended at the frame at pc: the
// thread's first function, a Go system stack's bottom (whose callers the
// runtime's own records give), or code that keeps no frame pointer.
func (w *walker) chainEnd(out []uint64, n int, pc uint64, exact bool, max int) ([]uint64, Cut) {
	look := pc
	if !exact {
		look--
	}
	cr := w.find(look)
	if cr == nil {
		return out, Cut{Reason: NotExecutable, PC: pc}
	}
	if cr.gotab != nil {
		switch cr.gotab.FrameKind(look - cr.bias) {
		case objfile.GoOutermost:
			return out, Cut{}
		case objfile.GoStackSwitch:
			rt := cr.gort
			if _, ok := g0Switch(cr, look-cr.bias); exact || !ok || rt.SchedPC == 0 {
				return out, Cut{Reason: StackSwitch, Module: moduleName(cr), PC: pc}
			}
			if rt.Cgo {
				// A callback from C may have moved g0's bottom, and
				// no stack copy says where it is now.
				return out, Cut{Reason: StackSwitch, Module: moduleName(cr), PC: pc}
			}
			if n+2 > max {
				return out, Cut{Reason: TooDeep, Limit: max}
			}
			return append(out, rt.SchedPC+cr.bias, rt.StartPC+cr.bias), Cut{}
		}
	}
	if cr.cfi != nil {
		if rr, err := cr.cfi.RowAt(look - cr.bias); err == nil && rr != nil && rr.Regs[callframe.RegRA].Kind == callframe.RuleUndefined {
			return out, Cut{} // its rules say nothing called it (_start, clone3)
		}
	}
	return out, Cut{Reason: NoUnwindInfo, Module: moduleName(cr), PC: pc}
}

// callerPC is how a caller frame's pc goes into a sampled stack: as it is
// for a return address, plus one for the pc a signal interrupted (see
// UnwindSample).
func callerPC(pc uint64, interrupted bool) uint64 {
	if interrupted {
		return pc + 1
	}
	return pc
}
