package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"

	"golang.org/x/arch/x86/x86asm"

	"github.com/stallwatch/stallwatch/internal/callframe"
	"github.com/stallwatch/stallwatch/internal/objfile"
)

// codeRange is an executable mapping of the target: where its code lives
// at run time, and its call frame information if it has any.
type codeRange struct {
	start, end uint64
	// bias turns a link-time address of the module into a run-time one.
	bias uint64
	cfi  *callframe.Table // nil: no CFI (anonymous JIT code, Go, stripped of it)
	// gotab unwinds the Go code of a Go binary, which has no CFI; gort
	// is what it needs to know of the binary's runtime.
	gotab *objfile.GoTable
	gort  *objfile.GoRuntime
	name  string
	// anon marks anonymous executable memory: where JITs put code.
	anon bool
	// problem says why the range is unwound worse than it could be.
	problem string
}

// JITCode gives the unwind rules of JIT-compiled code: the call frame
// information the runtime published for the code live at pc at
// CLOCK_MONOTONIC time t (0: the latest), with the bias that turns the
// table's addresses into run-time ones, or a rule of its own for code it
// knows (see package target); ok false: none, frame pointers.
//
// valid says how long the answer holds: for every sample time in it, in
// the generation it was given in and in every later one while Unchanged
// says that no code was loaded, moved or freed at pc since, pc has the
// same answer. A zero JITSpan holds for no time: the answer is asked
// again at each frame.
type JITCode interface {
	UnwindInfo(pc, t uint64) (cfi *callframe.Table, bias uint64, valid JITSpan, ok bool)
	// Generation is the generation of the answers for a sample taken at
	// t (0: the latest), asked once per walk: the JIT may first read what
	// its sources gained (the GDB JIT interface's list, when the sample
	// is newer than its last read).
	Generation(t uint64) uint64
	// Unchanged reports whether no code was loaded, moved or freed over
	// [lo, hi) from generation g to the current one, so that g's answers
	// there still hold; false when that is no longer known.
	Unchanged(g, lo, hi uint64) bool
}

// JITSpan is a stretch of sample times [From, Until); Until MaxUint64 is
// no end. The zero JITSpan holds nothing.
type JITSpan struct {
	From, Until uint64
}

// holds reports whether the span holds time t (0: the latest).
func (sp JITSpan) holds(t uint64) bool {
	if t == 0 {
		t = math.MaxUint64
	}
	return t >= sp.From && (t < sp.Until || sp.Until == math.MaxUint64 && sp.From < sp.Until)
}

// and is the times both spans hold.
func (sp JITSpan) and(o JITSpan) JITSpan {
	return JITSpan{max(sp.From, o.From), min(sp.Until, o.Until)}
}

// anyTime is the span of every sample time.
var anyTime = JITSpan{0, math.MaxUint64}

// jitBytesFor bounds how long JIT code's bytes, read from the target to
// check a caller, are taken for: for samples taken up to this long after
// the read. Code replaced in place with no record of it (a runtime
// patching a call site, code nobody describes reused) is then read again
// as it is at most this long after the sample; a walk that reads the
// target's code as it unwinds reads it after the sample too. Code a JIT
// file says was replaced is asked again at once (Unchanged).
const jitBytesFor = uint64(time.Second)

// walker walks one stack.
type walker struct {
	proc *Process // where code is looked up
	mem  Memory
	// stack, when onStack, is the sample's stack copy, read in place of
	// mem (without the allocation a Memory made of it costs each walk).
	stack   dumpMemory
	onStack bool
	// scan allows the saved-BP search when a frame needs a frame pointer
	// nobody knows (BlockedStack); it needs the code readable in mem.
	scan bool
	// code reads the target's code (return addresses are checked against
	// the call before them); nil: mem.
	code Memory
	// jit names the unwind rules of JIT code (nil: none), at time t; its
	// generation when the walk began.
	jit    JITCode
	jitGen uint64
	t      uint64
	// dec is what the verdict being decided on a caller (checkEdge)
	// depended on of JIT code.
	dec decision
	// copySize is the size of the stack copy mem serves (0: not a copy)
	// and asked the size asked of the kernel, for the Cut that says it
	// was too small or cut short.
	copySize, asked int
	// guessed: a frame was found by a rule that guesses (frame pointers
	// without rules, a stack scan, a leaf's top of stack): from there on
	// every caller is checked against its call site (verify.go). under
	// is an address inside the frame under the last one checked (0:
	// none), which tells calls of runtime.systemstack apart.
	guessed bool
	under   uint64
	// signals counts signal frames: their stack pointer may go down
	// (sigaltstack), so they are bounded rather than required to climb.
	signals int
	// last and prev are the code ranges found last: consecutive frames
	// are often in one module, or in two.
	last, prev *codeRange
	// rules caches how frames are unwound, per address, for the layout
	// generation gen (nil: no cache; see ruleCache).
	rules *ruleCache
	gen   uint64
	// hint is the rule cache's entry the last caller's check found: the
	// next step's (cachedRule).
	hint *cachedRule
	// funcs caches JIT functions' extents (nil: no cache, and no caller
	// in or into JIT code is cached either).
	funcs *funcCache
}

// lookup finds the executable mapping holding a run-time address.
func (w *walker) lookup(pc uint64) *codeRange { return w.proc.lookup(pc) }

// find is lookup, trying the two ranges found last first (a JIT's code
// and the runtime's own binary take turns in its stacks).
func (w *walker) find(pc uint64) *codeRange {
	if l := w.last; l != nil && pc >= l.start && pc < l.end {
		return l
	}
	if l := w.prev; l != nil && pc >= l.start && pc < l.end {
		w.last, w.prev = l, w.last
		return l
	}
	cr := w.lookup(pc)
	if cr != nil {
		w.last, w.prev = cr, w.last
	}
	return cr
}

// codeMem is where the target's code and data are read.
func (w *walker) codeMem() Memory {
	if w.code != nil {
		return w.code
	}
	return w.memory()
}

// memory is what the walk reads the stack from.
func (w *walker) memory() Memory {
	if w.onStack {
		return &dumpMemory{base: w.stack.base, b: w.stack.b}
	}
	return w.mem
}

// maxSignalFrames bounds the signal frames of one walk.
const maxSignalFrames = 8

// frameState is the registers of the frame being unwound.
type frameState struct {
	regs callframe.RegState
	// exact: regs' rip is the address of the next instruction to run (the
	// first frame, or a frame interrupted by a signal), not a return
	// address, so it is looked up as is rather than minus one.
	exact bool
	first bool
}

func (s *frameState) ip() uint64 { v, _ := s.regs.Get(callframe.RegRA); return v }
func (s *frameState) sp() uint64 { v, _ := s.regs.Get(callframe.RegRSP); return v }

func newFrameState(r Regs) frameState {
	var s frameState
	s.regs.Set(callframe.RegRA, r.IP)
	s.regs.Set(callframe.RegRSP, r.SP)
	if r.BPKnown {
		s.regs.Set(callframe.RegRBP, r.BP)
	}
	s.exact, s.first = true, true
	return s
}

// stepResult is the caller's frame, or why there is none.
type stepResult struct {
	how Method
	// signal: the frame just unwound was a signal trampoline; both its
	// own pc and its caller's are exact addresses.
	signal bool
	cfa    uint64 // the callee's canonical frame address (its SP before the call, plus 0)
	// end is set when there is no caller: done when the thread's first
	// frame was reached, else cut says why the walk could go no further.
	end bool
	cut Cut
}

func finished(how Method, cfa uint64) stepResult { return stepResult{how: how, cfa: cfa, end: true} }

func cutAt(r Reason, cr *codeRange, pc uint64) stepResult {
	return stepResult{end: true, cut: Cut{Reason: r, Module: moduleName(cr), PC: pc}}
}

var errNeedBP = errors.New("frame pointer needed and unknown")

// read64 reads a word of the stack or of memory the rules point to.
func (w *walker) read64(addr uint64) (uint64, error) {
	if w.onStack {
		return w.stack.word(addr)
	}
	return readWord(w.mem, addr)
}

// readCut is the Cut of a failed read at addr: the copy was too small, or
// the frame is bad.
func (w *walker) readCut(err error, cr *codeRange, pc uint64) stepResult {
	if errors.Is(err, errOutsideCopy) {
		return stepResult{end: true, cut: w.copyCut(cr, pc)}
	}
	return cutAt(BadFrame, cr, pc)
}

// copyCut says the walk needed more of the stack than its copy holds,
// and, when the kernel copied less than it was asked, whether the copy
// stopped at the end of the stack's mapping (else at a page that was not
// resident: the kernel copies without faulting pages in).
func (w *walker) copyCut(cr *codeRange, pc uint64) Cut {
	c := Cut{Reason: CopyExhausted, Module: moduleName(cr), PC: pc, Limit: max(w.asked, w.copySize), Copied: w.copySize}
	if c.Short() && w.proc != nil {
		top := w.stack.base + uint64(w.copySize)
		if _, end, ok := w.proc.space.Region(w.stack.base); ok && end == top {
			c.StackEnd = true
		}
	}
	return c
}

// step unwinds s to its caller's frame.
func (w *walker) step(s *frameState) stepResult {
	pc := s.ip()
	look := pc
	if !s.exact {
		// A return address is the instruction after the call, which may
		// belong to the next function (calls to noreturn functions).
		look = pc - 1
	}
	if e := w.cachedRule(look); e != nil {
		if e.row == nil {
			return w.fpStepState(s, e.cr)
		}
		if e.flat.ok {
			if cfa, ok := w.flatStep(s, e); ok {
				return stepResult{how: CFI, cfa: cfa}
			}
		}
		return w.cfiStep(s, e.cr, e.row, e.ruled, e.fnStart)
	}
	cr := w.find(look)
	if cr == nil {
		return cutAt(NotExecutable, nil, pc)
	}
	// A Go binary's Go code is unwound by its pclntab, as Go's own
	// traceback does (it also knows where stacks start and switch); its
	// C code (cgo, libc linked in) by CFI.
	if cr.gotab != nil && s.exact && w.inSigreturn(pc) {
		return w.sigreturnStep(s, cr)
	}
	if cr.gotab != nil {
		if res, ok := w.goStep(s, cr, look-cr.bias); ok {
			return res
		}
	}
	cfi, bias := cr.cfi, cr.bias
	// A module's own tables are cached for the layout; JIT rules for the
	// span of sample times and the JIT's generation its answer holds
	// (code and its tables are replaced at one address by later code);
	// anonymous code without a JIT is not, nor Go code (its pclntab
	// above).
	key := cachedRule{gen: w.gen, pc: look, cr: cr}
	cacheable := w.rules != nil && cr.gotab == nil && !cr.anon
	if cfi == nil && cr.anon && w.jit != nil {
		c, b, span, ok := w.jit.UnwindInfo(look, w.t)
		if ok {
			cfi, bias = c, b
		}
		key.jit, key.jitGen, key.span = true, w.jitGen, span
		cacheable = w.rules != nil && span.holds(w.t)
	}
	if cfi != nil {
		rr, err := cfi.RowAt(look - bias)
		if err != nil {
			return cutAt(BadFrame, cr, pc)
		}
		if rr != nil {
			ruled, fnStart := ruledRegs(rr), rr.FnStart+bias
			if cacheable {
				e := key
				e.row, e.ruled, e.fnStart = rr, ruled, fnStart
				e.flat = compileFlat(rr, ruled)
				w.rules.put(&e)
			}
			return w.cfiStep(s, cr, rr, ruled, fnStart)
		}
	}
	if cacheable {
		e := key
		w.rules.put(&e)
	}
	return w.fpStepState(s, cr)
}

// cachedRule is the cached rule for the frame at pc that holds for this
// walk, or nil. The entry the caller's check found (executable) is taken
// without a second probe.
func (w *walker) cachedRule(pc uint64) *cachedRule {
	e := w.hint
	w.hint = nil
	if e == nil || e.pc != pc {
		e = w.rules.get(w.gen, pc)
	}
	if e != nil && w.ruleHolds(e) {
		return e
	}
	return nil
}

// ruleHolds reports whether a cached rule holds for this walk: a
// module's for its layout (the cache's key), JIT code's for the sample
// times its JIT said, in its generation or a later one that changed
// nothing at its address (then it is kept for that one).
func (w *walker) ruleHolds(e *cachedRule) bool {
	if !e.jit {
		return true
	}
	if !e.span.holds(w.t) {
		return false
	}
	if e.jitGen == w.jitGen {
		return true
	}
	if w.jit == nil || !w.jit.Unchanged(e.jitGen, e.pc, e.pc+1) {
		return false
	}
	c := *e
	c.jitGen = w.jitGen
	w.rules.put(&c)
	return true
}

// warmStep unwinds s to its caller by the frame's cached rule: the flat
// form of its row (flatStep), or its frame record where the code has no
// rows (warmFPStep: JIT code) — the step of nearly every warm frame,
// without the general step's second probe of the cache and its results.
// ok false, s unchanged: step decides (no such rule, or a step that
// fails, which step then finds again and says why).
func (w *walker) warmStep(s *frameState) (cfa uint64, how Method, ok bool) {
	look := s.ip()
	if !s.exact {
		look--
	}
	e := w.cachedRule(look)
	switch {
	case e == nil:
		return 0, 0, false
	case e.row == nil:
		cfa, ok = w.warmFPStep(s)
		return cfa, FramePointerChain, ok
	case !e.flat.ok:
		return 0, 0, false
	}
	cfa, ok = w.flatStep(s, e)
	return cfa, CFI, ok
}

// flatStep unwinds s by a cached row's flat form (compileFlat), in place:
// what cfiStep does with the row, without its table of rules or a copy
// of the registers, and it returns the callee's CFA. ok false, s
// unchanged: cfiStep decides (the CFA's register unknown: a frame
// pointer to scan for; a read that fails; the end of the stack; a bad
// frame), and says why.
func (w *walker) flatStep(s *frameState, e *cachedRule) (cfa uint64, ok bool) {
	f := &e.flat
	base, known := s.regs.Get(uint64(f.cfaReg))
	if !known {
		return 0, false
	}
	cfa, sp := base+uint64(f.cfaOff), s.sp()
	var ra uint64
	var err error
	if at := cfa + uint64(int64(f.saved[0].off)); w.onStack { // no call per read
		ra, err = w.stack.word(at)
	} else {
		ra, err = readWord(w.mem, at)
	}
	if err != nil || ra == 0 || cfa <= sp {
		// cfiStep's cuts: a caller's frame lies above its callee's.
		return 0, false
	}
	was := s.regs.Known()
	keep := f.keep
	for _, sl := range f.saved[1:f.n] {
		at := cfa + uint64(int64(sl.off))
		var v uint64
		var err error
		if w.onStack {
			v, err = w.stack.word(at)
		} else {
			v, err = readWord(w.mem, at)
		}
		if err == nil {
			s.regs.Set(uint64(sl.reg), v)
			keep |= 1 << sl.reg
		} else if was&(1<<sl.reg) != 0 && at < sp {
			// Popped already (see cfiStep): the register holds it.
			keep |= 1 << sl.reg
		}
	}
	s.regs.Narrow(keep)
	s.regs.Set(callframe.RegRA, ra)
	s.regs.Set(callframe.RegRSP, cfa)
	s.exact, s.first = false, false
	return cfa, true
}

// cfiStep applies the rules of a row; ruled is the set of registers it
// has a rule for (ruledRegs).
func (w *walker) cfiStep(s *frameState, cr *codeRange, rr *callframe.Row, ruled uint32, fnStart uint64) stepResult {
	how := CFI
	pc := s.ip()
	cfa, err := w.cfa(s, &rr.Rules)
	if errors.Is(err, errNeedBP) && w.scan {
		bp, ok := w.scanForFrame(s.sp(), fnStart)
		if !ok {
			return cutAt(NoUnwindInfo, cr, pc)
		}
		s.regs.Set(callframe.RegRBP, bp)
		how = Scanned
		cfa, err = w.cfa(s, &rr.Rules)
	}
	if errors.Is(err, errNeedBP) {
		return cutAt(NoUnwindInfo, cr, pc)
	}
	if err != nil {
		return w.readCut(err, cr, pc)
	}
	var next callframe.RegState
	// Registers without a rule: the stack pointer is the CFA, and
	// callee-saved registers keep their values.
	for m := calleeSavedRegs &^ ruled; m != 0; m &= m - 1 {
		r := uint64(bits.TrailingZeros32(m))
		if v, ok := s.regs.Get(r); ok {
			next.Set(r, v)
		}
	}
	if ruled&(1<<callframe.RegRSP) == 0 {
		next.Set(callframe.RegRSP, cfa)
	}
	// Every rule reads the callee's registers (s), never the caller's
	// being built, so their order does not matter.
	for m := ruled; m != 0; m &= m - 1 {
		r := uint64(bits.TrailingZeros32(m))
		ru := &rr.Regs[r]
		switch ru.Kind {
		case callframe.RuleUndefined:
		case callframe.RuleSame:
			if v, ok := s.regs.Get(r); ok {
				next.Set(r, v)
			}
		case callframe.RuleOffset:
			at := cfa + uint64(ru.Off)
			if v, err := w.read64(at); err == nil {
				next.Set(r, v)
			} else if r == callframe.RegRA {
				return w.readCut(err, cr, pc)
			} else if v, ok := s.regs.Get(r); ok && at < s.sp() {
				// A slot below the stack pointer is one the code has
				// popped the register from already (V8's rules after
				// an epilogue's pop %rbp): the register holds it.
				next.Set(r, v)
			}
		case callframe.RuleValOffset:
			next.Set(r, cfa+uint64(ru.Off))
		case callframe.RuleRegister:
			if v, ok := s.regs.Get(uint64(ru.Reg)); ok {
				next.Set(r, v)
			}
		case callframe.RuleExpr, callframe.RuleValExpr:
			v, err := callframe.EvalExpr(ru.Expr, &s.regs, w.memory(), cfa)
			if err == nil && ru.Kind == callframe.RuleExpr {
				v, err = w.read64(v)
			}
			if err == nil {
				next.Set(r, v)
			} else if r == callframe.RegRA {
				return w.readCut(err, cr, pc)
			}
		}
	}
	if rr.Regs[callframe.RegRA].Kind == callframe.RuleUndefined {
		return finished(how, cfa)
	}
	ra, ok := next.Get(callframe.RegRA)
	if !ok {
		return cutAt(BadFrame, cr, pc)
	}
	if ra == 0 {
		return finished(how, cfa)
	}
	if rr.Signal {
		// A signal frame may switch stacks (sigaltstack): bounded in
		// number instead of required to climb.
		if w.signals++; w.signals > maxSignalFrames {
			return cutAt(BadFrame, cr, pc)
		}
	} else if nsp, _ := next.Get(callframe.RegRSP); nsp <= s.sp() {
		// Any other caller's frame lies above its callee's.
		return cutAt(BadFrame, cr, pc)
	}
	s.regs = next
	s.exact = rr.Signal
	s.first = false
	return stepResult{how: how, cfa: cfa, signal: rr.Signal}
}

// cfa computes the canonical frame address of a row.
func (w *walker) cfa(s *frameState, rw *callframe.Rules) (uint64, error) {
	if rw.CFAExpr != nil {
		v, err := callframe.EvalExpr(rw.CFAExpr, &s.regs, w.memory())
		if err != nil {
			return 0, fmt.Errorf("CFA expression: %w", err)
		}
		return v, nil
	}
	v, ok := s.regs.Get(rw.CFAReg)
	if !ok {
		if rw.CFAReg == callframe.RegRBP {
			return 0, errNeedBP
		}
		return 0, fmt.Errorf("CFA is based on %s, which is unknown", callframe.RegName(rw.CFAReg))
	}
	return v + uint64(rw.CFAOff), nil
}

// fpStepState unwinds a frame without CFI by its frame pointer.
func (w *walker) fpStepState(s *frameState, cr *codeRange) stepResult {
	how := FramePointerChain
	pc := s.ip()
	bp, known := s.regs.Get(callframe.RegRBP)
	if !known {
		if !w.scan {
			return cutAt(NoUnwindInfo, cr, pc)
		}
		var ok bool
		if bp, ok = w.scanForFrame(s.sp(), 0); !ok {
			// A frameless leaf (Go's and the JIT's system call stubs)
			// has its return address on top of the stack and no frame
			// record. This is tried last: a function with a frame may
			// have a stale return address there.
			if ra, err := w.read64(s.sp()); err == nil && s.first && w.isReturnAddress(ra) {
				s.regs = callframe.RegState{}
				s.regs.Set(callframe.RegRA, ra)
				s.regs.Set(callframe.RegRSP, s.sp()+8)
				s.exact, s.first = false, false
				return stepResult{how: Leaf, cfa: s.sp()}
			}
			return cutAt(NoUnwindInfo, cr, pc)
		}
		how = Scanned
	}
	f, err := w.fpStep(bp, s.sp())
	if err != nil {
		if errors.Is(err, errOutsideCopy) {
			return w.readCut(err, cr, pc)
		}
		// The chain ends: code that does not keep frame pointers is
		// where rbp stopped pointing at a frame record.
		return cutAt(NoUnwindInfo, cr, pc)
	}
	s.callerByRecord(f)
	return stepResult{how: how, cfa: f.sp}
}

// warmFPStep is fpStepState's step where it is plain: rbp is known and
// leads to a frame record. ok false, s unchanged: fpStepState decides
// (a scan, a leaf, the chain's end) and says why.
func (w *walker) warmFPStep(s *frameState) (cfa uint64, ok bool) {
	bp, known := s.regs.Get(callframe.RegRBP)
	if !known {
		return 0, false
	}
	f, err := w.fpStep(bp, s.sp())
	if err != nil {
		return 0, false
	}
	s.callerByRecord(f)
	return f.sp, true
}

// callerByRecord makes s the caller's frame the frame record f gave:
// only its pc, stack pointer and frame pointer are known.
func (s *frameState) callerByRecord(f fpFrame) {
	s.regs.Narrow(0)
	s.regs.Set(callframe.RegRA, f.ip)
	s.regs.Set(callframe.RegRSP, f.sp)
	if f.bp != 0 {
		s.regs.Set(callframe.RegRBP, f.bp)
	}
	s.exact, s.first = false, false
}

// fpStep follows one link of the frame-pointer chain with the walker's
// memory (see fpLink).
func (w *walker) fpStep(bp, sp uint64) (fpFrame, error) {
	return fpLink(w.read64, bp, sp)
}

// goStep unwinds a Go frame at link-time pc with its binary's pclntab: the
// stack pointer's distance below its value at the function's entry gives
// the return address's slot; a function that has pushed the frame pointer
// (it does so first, so the distance is 8 or more) saved it just below.
// runtime.goexit is every goroutine's outermost frame: the walk ends there
// rather than reading the stale memory above it. Where the runtime
// switches stacks: mcall and morestack call their callee at the bottom of
// the thread's system stack, whose caller is mstart0 (g0Step); the other
// switches (systemstack) keep a frame record that leads back to the
// goroutine's stack, and are unwound by it (ok is false: the caller goes
// on with frame pointers).
func (w *walker) goStep(s *frameState, cr *codeRange, pc uint64) (stepResult, bool) {
	switch cr.gotab.FrameKind(pc) {
	case objfile.GoOutermost:
		return finished(GoTable, s.sp()), true
	case objfile.GoStackSwitch:
		written, after := true, uint64(0)
		if s.exact {
			written, after = w.spWritten(cr, pc)
		}
		if !written {
			break // not switched yet: its frame is as its table says
		}
		if sw, ok := g0Switch(cr, pc); ok {
			if s.exact {
				// Switched, not called yet: what it pushed since is
				// what its frame size grew by since the switch.
				d1, ok1 := cr.gotab.SPDelta(pc)
				d0, ok0 := cr.gotab.SPDelta(after)
				if !ok0 || !ok1 || d1 < d0 {
					return cutAt(StackSwitch, cr, s.ip()), true
				}
				sw.Pushed = d1 - d0
			}
			return w.g0Step(s, cr, sw), true
		}
		if bp, ok := s.regs.Get(callframe.RegRBP); ok && bp != 0 && bp&7 == 0 {
			return w.switchStep(s, cr, bp), true
		}
		// mcall, systemstack and the like switch stacks: the caller is
		// on another stack that only the Go scheduler's records say.
		return cutAt(StackSwitch, cr, s.ip()), true
	}
	delta, ok := cr.gotab.SPDelta(pc)
	if !ok {
		return stepResult{}, false
	}
	sp := s.sp()
	cfa := sp + delta + 8
	if cfa <= sp {
		return stepResult{}, false
	}
	ra, err := w.read64(cfa - 8)
	if rt := cr.gort; rt != nil && rt.SchedPC != 0 && !s.exact && pc == rt.SchedPC-1 {
		// mstart0 where mstart1 returns: its caller is mstart. A g0
		// whose bottom is elsewhere is in a callback from C (cgo).
		switch {
		case err == nil && ra != rt.StartPC+cr.bias:
			return cutAt(StackSwitch, cr, s.ip()), true
		case errors.Is(err, errOutsideCopy) && !rt.Cgo:
			ra, err = rt.StartPC+cr.bias, nil
		}
	}
	if err != nil {
		return w.readCut(err, cr, s.ip()), true
	}
	var next callframe.RegState
	next.Set(callframe.RegRA, ra)
	next.Set(callframe.RegRSP, cfa)
	if delta >= 8 {
		if bp, err := w.read64(cfa - 16); err == nil {
			next.Set(callframe.RegRBP, bp)
		}
	} else if bp, ok := s.regs.Get(callframe.RegRBP); ok {
		next.Set(callframe.RegRBP, bp) // not pushed yet: still the caller's
	}
	if ra == 0 {
		return finished(GoTable, cfa), true
	}
	s.regs = next
	s.exact, s.first = false, false
	return stepResult{how: GoTable, cfa: cfa}, true
}

// g0Step unwinds mcall's or morestack's frame (at the return address of
// their call): they set the stack pointer to g0.sched.sp, pushed sw.Pushed
// bytes and called there, so their caller is mstart0 at g0.sched.pc with
// that stack pointer (package objfile, GoRuntime).
func (w *walker) g0Step(s *frameState, cr *codeRange, sw objfile.G0Switch) stepResult {
	rt := cr.gort
	if rt.SchedPC == 0 {
		return cutAt(StackSwitch, cr, s.ip())
	}
	sp0 := s.sp() + sw.Pushed
	var next callframe.RegState
	next.Set(callframe.RegRA, rt.SchedPC+cr.bias)
	next.Set(callframe.RegRSP, sp0)
	s.regs = next
	s.exact, s.first = false, false
	return stepResult{how: GoTable, cfa: sp0}
}

// switchStep unwinds systemstack's frame by its frame record, which it
// pushed on the goroutine's stack before it switched: its caller is on
// that stack, wherever it lies from the system stack (no climbing is
// asked). The caller is checked against its call site like every frame
// found by a frame pointer.
func (w *walker) switchStep(s *frameState, cr *codeRange, bp uint64) stepResult {
	ra, err := w.read64(bp + 8)
	if err != nil {
		return w.readCut(err, cr, s.ip())
	}
	saved, err := w.read64(bp)
	if err != nil {
		return w.readCut(err, cr, s.ip())
	}
	var next callframe.RegState
	next.Set(callframe.RegRA, ra)
	next.Set(callframe.RegRSP, bp+16)
	if saved != 0 {
		next.Set(callframe.RegRBP, saved)
	}
	s.regs = next
	s.exact, s.first = false, false
	return stepResult{how: FramePointerChain, cfa: bp + 16}
}

// maxSwitchPrologue bounds the code decoded of a stack switch before the
// instruction a sample stopped at.
const maxSwitchPrologue = 512

// spWritten reports whether the Go function holding link-time pc has
// written the stack pointer (not pushed or popped it) before pc, and the
// link-time address after the last such write: a sample taken in mcall or
// gogo before the switch finds its frame where its frame sizes say.
// Unknown code counts as switched, at an unknown place (0).
func (w *walker) spWritten(cr *codeRange, pc uint64) (bool, uint64) {
	lo, _, ok := cr.gotab.FuncBounds(pc)
	if !ok || pc-lo > maxSwitchPrologue {
		return true, 0
	}
	code := make([]byte, pc-lo)
	if _, err := w.codeMem().ReadAt(code, lo+cr.bias); err != nil {
		return true, 0
	}
	var after uint64
	for i := 0; i < len(code); {
		inst, err := x86asm.Decode(code[i:], 64)
		if err != nil || inst.Len == 0 {
			return true, 0
		}
		i += inst.Len
		switch inst.Op {
		case x86asm.MOV, x86asm.LEA, x86asm.XCHG:
			if inst.Args[0] == x86asm.RSP || inst.Op == x86asm.XCHG && inst.Args[1] == x86asm.RSP {
				after = lo + uint64(i)
			}
		}
	}
	return after != 0, after
}

// The kernel's signal frame on x86-64 (rt_sigframe): after the handler
// returned to the sigreturn trampoline, the stack pointer is at its
// ucontext, whose mcontext (at 40) holds the interrupted registers.
const (
	ucRBP = 40 + 80
	ucRSP = 40 + 120
	ucRIP = 40 + 128
)

// sigreturnStep unwinds a sample taken in Go's rt_sigreturn trampoline,
// which has no call frame information: its caller is the instruction the
// signal interrupted, with the registers the signal frame saved.
func (w *walker) sigreturnStep(s *frameState, cr *codeRange) stepResult {
	if w.signals++; w.signals > maxSignalFrames {
		return cutAt(BadFrame, cr, s.ip())
	}
	sp := s.sp()
	var next callframe.RegState
	for _, r := range []struct {
		reg uint64
		off uint64
	}{{callframe.RegRA, ucRIP}, {callframe.RegRSP, ucRSP}, {callframe.RegRBP, ucRBP}} {
		v, err := w.read64(sp + r.off)
		if err != nil {
			return w.readCut(err, cr, s.ip())
		}
		next.Set(r.reg, v)
	}
	s.regs = next
	s.exact, s.first = true, false
	return stepResult{how: CFI, cfa: sp, signal: true}
}

// g0Switch returns the g0 switch (objfile.GoRuntime) holding link-time pc.
func g0Switch(cr *codeRange, pc uint64) (objfile.G0Switch, bool) {
	if cr.gort == nil {
		return objfile.G0Switch{}, false
	}
	for _, sw := range cr.gort.G0Switch {
		if sw.Contains(pc) {
			return sw, true
		}
	}
	return objfile.G0Switch{}, false
}

// walk unwinds from regs until the end of the stack, a cut or max frames.
// A caller whose address is in no executable mapping is not a frame: the
// walk ends before it (nothing is invented from stack bytes); nor is one
// its call site refutes, once a rule guessed (verify.go).
func (w *walker) walk(regs Regs, max int) Trace {
	var t Trace
	if max <= 0 {
		return t
	}
	s := newFrameState(regs)
	t.push(regs.IP, Registers, knownBP(regs))
	for len(t.PCs) < max {
		below, belowExact := s.ip(), s.exact
		res := w.step(&s)
		if res.end {
			t.Cut = res.cut
			return t
		}
		if !w.executable(s.ip(), res.signal) {
			t.Cut = Cut{Reason: NotExecutable, PC: s.ip()}
			return t
		}
		missing, cut := w.verify(&res, below, belowExact, s.ip())
		if cut.Truncated() {
			t.Cut = cut
			return t
		}
		if res.signal {
			t.Exact[len(t.Exact)-1] = true
		}
		bp, _ := s.regs.Get(callframe.RegRBP)
		if missing != 0 && len(t.PCs)+1 < max {
			t.push(missing, res.how, 0) // a frame the chain skipped: its frame pointer unknown
		}
		t.push(s.ip(), res.how, bp)
		t.Exact[len(t.Exact)-1] = res.signal
	}
	t.Cut = Cut{Reason: TooDeep, Limit: max}
	return t
}

// verify checks the caller a step found (ra) against its call site when
// this step or an earlier one guessed: below is the pc of the frame it
// returned from (exact: not a return address). It returns the return
// address of a frame the rules skipped, if any, or the Cut of a caller
// that cannot be.
func (w *walker) verify(res *stepResult, below uint64, exact bool, ra uint64) (uint64, Cut) {
	switch res.how {
	case FramePointerChain, Scanned, Leaf:
		w.guessed = true
	}
	if !exact {
		below--
	}
	under := w.under
	w.under = below
	if !w.guessed || res.signal {
		return 0, Cut{}
	}
	e := w.checkEdge(ra, below, under)
	switch e.verdict {
	case edgeOK:
		return 0, Cut{}
	case edgeMissing:
		// Only a frame record can lead past a frame: the record found
		// may be the caller's caller's when the frame below has none.
		// Rules that read the frame itself cannot have skipped one.
		if res.how == FramePointerChain || res.how == Scanned {
			return e.missing, Cut{}
		}
	}
	return 0, edgeCut(e, ra)
}

// executable reports whether a caller's pc lies in executable code (a
// return address is looked up minus one, an exact address as it is).
func (w *walker) executable(pc uint64, exact bool) bool {
	if !exact {
		if pc == 0 {
			return false
		}
		pc--
	}
	if e := w.rules.get(w.gen, pc); e != nil {
		w.hint = e // the next step's rule, most likely
		return true
	}
	return w.find(pc) != nil
}

// Scan limits: how far above the stack pointer a saved frame pointer is
// looked for, and how far apart two linked frames may be.
const (
	scanWindow   = 16 << 10
	maxFrameSize = 1 << 20
)

// scanForFrame looks above sp for the frame record of the function that
// starts at fn (0: unknown) in the frame-pointer convention: its saved
// frame pointer followed by its return address. The first record that
// passes is taken, the record of the innermost frame: stale records left
// by earlier calls lie below it, in memory the function has not written.
// A candidate's return address must follow a call instruction; a direct
// call must call fn (through its PLT entry, if any); otherwise the saved
// frame pointer must be 0 or lie above the record and lead to another
// return address.
func (w *walker) scanForFrame(sp, fn uint64) (uint64, bool) {
	buf := make([]byte, scanWindow)
	mem := w.memory()
	n, _ := mem.ReadAt(buf, sp)
	if n < 16 {
		// Memories that refuse partial reads get one more, smaller try:
		// to the end of the page.
		n, _ = mem.ReadAt(buf[:4096-int(sp&4095)], sp)
	}
	buf = buf[:n&^7]
	word := func(i int) uint64 { return binary.LittleEndian.Uint64(buf[i:]) }
	for i := 0; i+16 <= len(buf); i += 8 {
		a := sp + uint64(i)
		saved, ra := word(i), word(i+8)
		target, call := w.callBefore(ra)
		if call == notCall {
			continue
		}
		if call == directCall && fn != 0 {
			if target == fn {
				return a, true
			}
			continue
		}
		if saved == 0 {
			return a, true
		}
		if saved <= a || saved-a > maxFrameSize || saved&7 != 0 {
			continue
		}
		if next, ok := readU64(mem, saved+8); ok && w.isReturnAddress(next) {
			return a, true
		}
	}
	return 0, false
}

// callBefore decodes the call instruction that ends right before ra, in
// executable code (x86.go): a direct call's target is returned, followed
// through a PLT entry.
func (w *walker) callBefore(ra uint64) (uint64, callKind) {
	if ra < 8 || w.lookup(ra-1) == nil {
		return 0, notCall
	}
	k, target := w.callAt(ra)
	return target, k
}

// isReturnAddress reports whether v follows a call instruction.
func (w *walker) isReturnAddress(v uint64) bool {
	_, k := w.callBefore(v)
	return k != notCall
}

// throughPLT follows a PLT entry (jmp *GOT(%rip), optionally after
// endbr64 and with a bnd prefix) to the function it jumps to.
func (w *walker) throughPLT(target uint64) uint64 {
	var b [16]byte
	if err := w.readCode(b[:], target); err != nil {
		return target
	}
	i := 0
	if b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa { // endbr64
		i = 4
	}
	if b[i] == 0xf2 { // bnd
		i++
	}
	if b[i] != 0xff || b[i+1] != 0x25 {
		return target
	}
	next := target + uint64(i) + 6
	slot := next + uint64(int64(int32(binary.LittleEndian.Uint32(b[i+2:]))))
	if dest, ok := w.codeWord(slot); ok && w.lookup(dest) != nil {
		return dest
	}
	return target
}
