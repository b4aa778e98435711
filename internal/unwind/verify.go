package unwind

import (
	"bytes"
	"encoding/binary"
	"sync/atomic"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/objfile"
)

// A caller found by exact rules (call frame information for the code at
// hand, a Go binary's frame sizes) is where the code put it. A caller
// found any other way — the frame-pointer chain the kernel walked, the
// walk's own frame-pointer fallback, the stack scan of a blocked thread,
// and every frame after one of those — is checked against the code
// before it is taken: the instruction before the return address must be
// a call, and a direct call must call the function of the frame below.
// A direct call of another function T is still possible when T jumps to
// the function below (a tail call, a compiler's cold part), or when T
// calls it and T's own frame is what the chain skipped (a frameless leaf:
// the kernel's chain then goes from its caller's frame record to the
// caller's caller); when T calls it from one place only, that place is
// T's frame, and it is put back. A T whose code cannot be read whole (its
// extent unknown: V8's builtins copied into its code space) cannot refute
// the edge. Anything else ends the walk with a Cut that says which return
// address failed and why.

// edgeVerdict is what the code says of a caller.
type edgeVerdict uint8

const (
	edgeOK edgeVerdict = iota
	// edgeMissing: the call called T, which calls the function below from
	// one place: T's frame lies between (edge.missing).
	edgeMissing
	edgeNotExecutable
	edgeNotACall
	edgeWrongCallee
)

// edge is the verdict on one return address over one callee, cached.
type edge struct {
	module  string // where the return address is, for the Cut
	missing uint64 // edgeMissing: the return address inside T
	// jit: the verdict read JIT code or asked the JIT of its functions,
	// and holds only in the layout generation gen and the JIT generation
	// jitGen it was decided in, for sample times in span (the JIT's
	// answers', and no later than jitBytesFor after the code was read).
	gen, jitGen uint64
	span        JITSpan
	verdict     edgeVerdict
	jit         bool
}

// edgeKey is a return address, the entry of the function it returned
// from and of the one under that (0: not known). undescribed: the
// function returned from is JIT code no JIT file describes (no direct
// call reaches it, wherever in it the frame was: the verdict depends on
// the return address alone).
type edgeKey struct {
	ra, callee, under uint64
	undescribed       bool
}

// decision is what a verdict being decided depended on of JIT code:
// whether it read any or asked the JIT, and the sample times the JIT's
// answers hold for.
type decision struct {
	jit  bool
	span JITSpan
}

// maxScannedFunc bounds the code of a call target scanned for its calls
// and jumps into the function below.
const maxScannedFunc = 256 << 10

// funcBounds returns the run-time range of the function holding pc (an
// exact address inside it: a return address minus one, or a sampled
// instruction pointer): from a Go binary's pclntab, a module's call frame
// information, or the JIT's records of its code. Every check of a caller
// asks it twice (the function returned from, the one under it): the
// answers are cached per address (funcCache), a module's for its layout,
// JIT code's as the JIT said.
func (w *walker) funcBounds(pc uint64) (lo, hi uint64, ok bool) {
	if e := w.funcs.get(w.gen, pc); e != nil && w.funcHolds(e) {
		return e.lo, e.hi, e.ok
	}
	cr := w.find(pc)
	if cr == nil {
		return 0, 0, false
	}
	if cr.anon && w.jit != nil {
		if f, ok := w.jit.(JITFuncs); ok {
			return w.jitFunc(f, pc)
		}
	}
	lo, hi, ok = fileFuncBounds(cr, pc)
	w.funcs.put(&cachedFunc{gen: w.gen, pc: pc, lo: lo, hi: hi, ok: ok})
	return lo, hi, ok
}

// fileFuncBounds is the function holding pc by its module's tables.
func fileFuncBounds(cr *codeRange, pc uint64) (lo, hi uint64, ok bool) {
	if cr.gotab != nil {
		if lo, hi, ok := cr.gotab.FuncBounds(pc - cr.bias); ok {
			return lo + cr.bias, hi + cr.bias, true
		}
	}
	if cr.cfi != nil {
		if lo, hi, ok := cr.cfi.FuncRange(pc - cr.bias); ok {
			return lo + cr.bias, hi + cr.bias, true
		}
	}
	return 0, 0, false
}

// funcHolds reports whether a cached extent holds for this walk: a
// module's for its layout (the key), JIT code's for the sample times and
// the generation its JIT said, or a later generation that changed nothing
// at its address (then it is kept for that one). What a JIT answer held
// for goes into the verdict being decided.
func (w *walker) funcHolds(e *cachedFunc) bool {
	if !e.jit {
		return true
	}
	if !e.span.holds(w.t) || e.jitGen != w.jitGen && (w.jit == nil || !w.jit.Unchanged(e.jitGen, e.pc, e.pc+1)) {
		return false
	}
	if e.jitGen != w.jitGen {
		c := *e
		c.jitGen = w.jitGen
		w.funcs.put(&c)
	}
	w.dec.jit = true
	w.dec.span = w.dec.span.and(e.span)
	return true
}

// jitFunc asks the JIT for the extent of the function at pc at the
// walk's time, and caches it for as long as the answer holds; what it
// held for goes into the verdict being decided.
func (w *walker) jitFunc(f JITFuncs, pc uint64) (lo, hi uint64, ok bool) {
	w.dec.jit = true
	lo, hi, span, ok := f.FuncAt(pc, w.t)
	w.dec.span = w.dec.span.and(span)
	if span.holds(w.t) {
		w.funcs.put(&cachedFunc{gen: w.gen, pc: pc, jit: true, jitGen: w.jitGen, span: span, lo: lo, hi: hi, ok: ok})
	}
	return lo, hi, ok
}

// JITFuncs is what a JITCode may also know: the code range of the JIT
// function live at pc at time t (0: the latest), which checks the calls
// into it; valid as for JITCode.UnwindInfo.
type JITFuncs interface {
	FuncAt(pc, t uint64) (lo, hi uint64, valid JITSpan, ok bool)
}

// checkEdge says whether ra can be the return address of the frame whose
// code holds below (an exact address in it); under, when not 0, is an
// exact address in the frame under that one. Verdicts over file code are
// cached per return address and callees, and in front of that per the
// exact addresses asked (exactEdgeTable); those that read JIT code or
// asked the JIT of its functions for as long as what they depended on
// holds (edge.jit): code at one address changes. The verdict returned is
// shared (a cached one is the cache's): it is read, never changed.
func (w *walker) checkEdge(ra, below, under uint64) *edge {
	if ra < 2 {
		return &notExecutableEdge
	}
	exact := w.proc != nil && w.funcs != nil
	if exact {
		if e := w.proc.exactEdge(ra, below, under, w); e != nil {
			return e
		}
	}
	e, kept := w.edgeByCallees(ra, below, under)
	if exact && kept {
		w.proc.keepExactEdge(ra, below, under, w, e)
	}
	return e
}

// edgeByCallees is checkEdge by the functions the frames are in: their
// extents looked up, the verdict kept per return address and callees
// (cachedEdge) or decided. kept: the verdict is the cache's, or one of
// the layout's alone, and holds for as long as w.dec and its own
// generations and span say (keepExactEdge).
func (w *walker) edgeByCallees(ra, below, under uint64) (e *edge, kept bool) {
	w.dec = decision{span: anyTime}
	raCR := w.find(ra - 1)
	if raCR == nil {
		return &notExecutableEdge, true
	}
	if raCR.gotab != nil && raCR.gotab.FrameKind(ra-1-raCR.bias) == objfile.GoOutermost {
		// runtime.goexit's planted return address follows a NOP: it
		// is every goroutine's first frame.
		return &okEdge, true
	}
	belowCR := w.find(below)
	if belowCR != nil && belowCR.gort != nil && belowCR.gort.AsyncPreempt.Contains(below-belowCR.bias) {
		// Injected by a preemption signal: it returns to the
		// instruction the signal interrupted, which no call precedes.
		return &okEdge, true
	}
	w.dec = decision{jit: raCR.anon, span: anyTime}
	calleeLo, calleeHi, known := w.funcBounds(below)
	undescribed := false
	if !known && (belowCR == nil || belowCR.anon) {
		// JIT code nobody describes (or mapped since the maps were
		// read): no direct call reaches it (its extent is taken as
		// empty), a jump through a pointer may.
		calleeLo, calleeHi, known, undescribed = below, below, true, true
		w.dec.jit = true
	}
	var underLo uint64
	if under != 0 && !undescribed {
		underLo, _, _ = w.funcBounds(under)
	}
	key := edgeKey{ra: ra, callee: calleeLo, under: underLo}
	if undescribed {
		// An empty extent: no call lands in it, whatever its start, and
		// the frame under is never asked.
		key = edgeKey{ra: ra, undescribed: true}
	}
	cache := w.proc != nil && (!w.dec.jit || w.funcs != nil)
	if cache {
		if e := w.proc.cachedEdge(key); e != nil && w.edgeHolds(e) {
			return e, true
		}
	}
	d := w.decideEdge(ra, calleeLo, calleeHi, known, underLo)
	d.module = moduleName(raCR)
	if w.dec.jit {
		d.jit, d.gen, d.jitGen = true, w.gen, w.jitGen
		d.span = w.dec.span.and(JITSpan{0, monotime.Now() + jitBytesFor})
		cache = cache && d.span.holds(w.t)
	}
	if cache {
		return w.proc.keepEdge(key, d), true
	}
	return &d, false
}

// The verdicts that need no code read: shared, never changed.
var (
	okEdge            = edge{}
	notExecutableEdge = edge{verdict: edgeNotExecutable}
)

// edgeHolds reports whether a cached verdict holds for this walk: file
// code's always, one that depended on JIT code in the generations and
// for the sample times it was decided for.
func (w *walker) edgeHolds(e *edge) bool {
	return !e.jit || e.gen == w.gen && e.jitGen == w.jitGen && e.span.holds(w.t)
}

// readCode reads the target's code at addr; reading JIT code goes into
// the verdict being decided.
func (w *walker) readCode(b []byte, addr uint64) error {
	if cr := w.find(addr); cr != nil && cr.anon {
		w.dec.jit = true
	}
	_, err := w.codeMem().ReadAt(b, addr)
	return err
}

// codeWord reads a word of the target's code or data at addr (readCode).
func (w *walker) codeWord(addr uint64) (uint64, bool) {
	var b [8]byte
	if w.readCode(b[:], addr) != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[:]), true
}

func (w *walker) decideEdge(ra, calleeLo, calleeHi uint64, known bool, underLo uint64) edge {
	if w.sigreturnAt(ra) {
		// A signal handler "returns" to the trampoline the kernel put
		// where a return address would be: no call precedes it.
		return edge{}
	}
	kind, raw := w.rawCallAt(ra)
	target := raw
	if kind == directCall {
		target = w.throughPLT(raw)
	}
	in := func(a uint64) bool { return a >= calleeLo && a < calleeHi }
	switch {
	case kind == notCall:
		return edge{verdict: edgeNotACall}
	case kind != directCall || !known:
		// An indirect call may have called anything; a callee whose
		// extent nobody knows cannot contradict a direct one.
		return edge{}
	case in(target), in(raw): // the callee, or the PLT entry it is in
		return edge{}
	}
	b := w.branchesOf(target)
	if b == nil || !b.complete {
		// Code whose extent nobody knows (V8's builtins copied into
		// its code space), or that does not decode: nothing says it
		// does not lead to the function below.
		return edge{}
	}
	if w.jumpsInto(b, calleeLo, calleeHi, maxTailCalls) {
		return edge{}
	}
	calls, _ := b.into(calleeLo, calleeHi)
	if len(calls) > 1 && underLo != 0 {
		calls = w.passing(calls, underLo)
	}
	if len(calls) == 1 {
		return edge{verdict: edgeMissing, missing: calls[0].ret}
	}
	return edge{verdict: edgeWrongCallee}
}

// maxTailCalls bounds the chain of tail calls followed from a call's
// target to the function below (glibc's __new_sem_wait_slow64 calls
// do_futex_wait, which jumps to __futex_abstimed_wait64, which jumps to
// __futex_abstimed_wait_common).
const maxTailCalls = 3

// jumpsInto reports whether the function swept in b reaches [lo, hi) by
// jumps alone: into it, through a register or memory (anywhere), through a
// PLT entry, or to the entry of another function that does, depth levels
// deep at most.
func (w *walker) jumpsInto(b *branches, lo, hi uint64, depth int) bool {
	if _, jumps := b.into(lo, hi); jumps {
		return true
	}
	for _, j := range b.jumps {
		t := w.throughPLT(j)
		if t >= lo && t < hi {
			return true
		}
		if depth <= 1 {
			continue
		}
		if next := w.branchesOf(t); next != nil && next.complete && next != b && w.jumpsInto(next, lo, hi, depth-1) {
			return true
		}
	}
	return false
}

// passing keeps the calls that pass the function at fn, by the address
// of its code or of a word that holds it (a Go closure without captured
// variables is such a word, fn·f), taken before the call: which of T's
// calls of runtime.systemstack called fn, where the chain skipped T's
// frame (Go before 1.21, whose systemstack kept no frame record).
func (w *walker) passing(calls []branch, fn uint64) []branch {
	var out []branch
	for _, c := range calls {
		for _, a := range c.leas {
			if a == fn {
				out = append(out, c)
				break
			}
			if v, ok := w.codeWord(a); ok && v == fn {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// branchesOf sweeps the code of the function that starts at entry (nil:
// none starts there, or it is too large), cached per Process for file
// code.
func (w *walker) branchesOf(entry uint64) *branches {
	lo, hi, ok := w.funcBounds(entry)
	if !ok || lo != entry || hi-lo > maxScannedFunc {
		return nil
	}
	cr := w.find(entry)
	cache := w.proc != nil && cr != nil && !cr.anon
	if cache {
		if b, ok := w.proc.cachedBranches(entry); ok {
			return b
		}
	}
	code := make([]byte, hi-lo)
	var b *branches
	if err := w.readCode(code, lo); err == nil {
		b = sweep(code, lo)
	}
	if cache {
		w.proc.keepBranches(entry, b)
	}
	return b
}

// The two encodings of rt_sigreturn's trampoline (glibc's __restore_rt,
// Go's sigreturn__sigaction): mov $15, %rax (or %eax); syscall.
var (
	sigreturnQ = []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05}
	sigreturnL = []byte{0xb8, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05}
)

// sigreturnAt reports whether pc is a signal trampoline: its CFI says so
// (a signal frame), or its code is rt_sigreturn's.
func (w *walker) sigreturnAt(pc uint64) bool {
	cr := w.lookup(pc)
	if cr == nil {
		return false
	}
	if cr.cfi != nil {
		if rr, err := cr.cfi.RowAt(pc - cr.bias); err == nil && rr != nil && rr.Signal {
			return true
		}
	}
	var b [9]byte
	if err := w.readCode(b[:], pc); err != nil {
		return false
	}
	return bytes.Equal(b[:], sigreturnQ) || bytes.Equal(b[:len(sigreturnL)], sigreturnL)
}

// inSigreturn reports whether pc is inside an rt_sigreturn trampoline
// (at its start, after its mov, or after its system call).
func (w *walker) inSigreturn(pc uint64) bool {
	for _, back := range []uint64{0, uint64(len(sigreturnL) - 2), uint64(len(sigreturnL)), uint64(len(sigreturnQ) - 2), uint64(len(sigreturnQ))} {
		if pc >= back && w.sigreturnCode(pc-back, back) {
			return true
		}
	}
	return false
}

// sigreturnCode reports whether one of the trampolines' code starts at
// start and is at least n bytes long.
func (w *walker) sigreturnCode(start, n uint64) bool {
	var b [9]byte
	if err := w.readCode(b[:], start); err != nil {
		return false
	}
	return bytes.Equal(b[:], sigreturnQ) && n <= uint64(len(sigreturnQ)) ||
		bytes.Equal(b[:len(sigreturnL)], sigreturnL) && n <= uint64(len(sigreturnL))
}

// rawCallAt decodes the call that ends right before ra: a direct call's
// target is returned as it is (a PLT entry, perhaps).
func (w *walker) rawCallAt(ra uint64) (callKind, uint64) {
	cr := w.lookup(ra - 1)
	if cr == nil {
		return notCall, 0
	}
	n := uint64(maxInsn)
	if ra-cr.start < n {
		n = ra - cr.start
	}
	var buf [maxInsn]byte
	b := buf[:n]
	if err := w.readCode(b, ra-n); err != nil {
		return notCall, 0
	}
	kind, rel := callEndingAt(b)
	if kind != directCall {
		return kind, 0
	}
	return kind, ra + uint64(int64(rel))
}

// callAt is rawCallAt with a direct call's target followed through a PLT
// entry.
func (w *walker) callAt(ra uint64) (callKind, uint64) {
	kind, t := w.rawCallAt(ra)
	if kind == directCall {
		t = w.throughPLT(t)
	}
	return kind, t
}

// edgeCut is the Cut of a caller the code refutes.
func edgeCut(e *edge, ra uint64) Cut {
	switch e.verdict {
	case edgeNotExecutable:
		return Cut{Reason: NotExecutable, PC: ra}
	case edgeNotACall:
		return Cut{Reason: NotACall, Module: e.module, PC: ra}
	}
	return Cut{Reason: WrongCallee, Module: e.module, PC: ra}
}

// maxCachedEdges bounds the cache of verdicts.
const maxCachedEdges = 1 << 16

// cachedEdge is the verdict kept for k, the cache's own (read, never
// changed), or nil.
func (p *Process) cachedEdge(k edgeKey) *edge {
	front := p.edgeFront()
	i := edgeSlotOf(k)
	if s := front.slots[i].Load(); s != nil && s.key == k {
		return &s.e
	}
	p.raMu.Lock()
	s := p.edges[k]
	p.raMu.Unlock()
	if s == nil {
		return nil
	}
	front.slots[i].Store(s)
	return &s.e
}

// edgeFrontBits sizes the lock-free table of verdicts in front of the
// map of them: 4,096 slots, direct-mapped.
const edgeFrontBits = 12

// edgeFrontTable is the verdicts looked up last, one per slot: a warm
// caller costs a probe rather than the lock and the map. Entries are
// immutable and the map's own; a colliding key replaces the slot's (the
// map still has it).
type edgeFrontTable struct {
	slots [1 << edgeFrontBits]atomic.Pointer[keptEdge]
}

type keptEdge struct {
	key edgeKey
	e   edge
}

func edgeSlotOf(k edgeKey) uint64 {
	h := mix3(k.ra, k.callee, k.under)
	if k.undescribed {
		h ^= 0x27d4eb2f165667c5
	}
	return h >> (64 - edgeFrontBits)
}

// mix3 hashes three addresses for the verdict tables' slots (its top
// bits are the slot).
func mix3(a, b, c uint64) uint64 {
	return a*0x9e3779b97f4a7c15 ^ b*0xc2b2ae3d27d4eb4f ^ c*0x165667b19e3779f9
}

// madeOnce is the table at t, made at its first use: a target never
// unwound by guesses has none.
func madeOnce[T any](t *atomic.Pointer[T]) *T {
	if v := t.Load(); v != nil {
		return v
	}
	t.CompareAndSwap(nil, new(T))
	return t.Load()
}

// edgeFront is the Process's table of verdicts by callees.
func (p *Process) edgeFront() *edgeFrontTable { return madeOnce(&p.front) }

func (p *Process) cachedBranches(entry uint64) (*branches, bool) {
	p.raMu.Lock()
	b, ok := p.sweeps[entry]
	p.raMu.Unlock()
	return b, ok
}

// maxSweeps bounds the functions whose branches are kept.
const maxSweeps = 1 << 12

func (p *Process) keepBranches(entry uint64, b *branches) {
	p.raMu.Lock()
	if p.sweeps == nil || len(p.sweeps) >= maxSweeps {
		p.sweeps = map[uint64]*branches{}
	}
	p.sweeps[entry] = b
	p.raMu.Unlock()
}

// keepEdge keeps e for k and returns the kept copy.
func (p *Process) keepEdge(k edgeKey, e edge) *edge {
	s := &keptEdge{key: k, e: e}
	p.raMu.Lock()
	if len(p.edges) >= maxCachedEdges {
		clear(p.edges)
	}
	p.edges[k] = s
	p.raMu.Unlock()
	p.edgeFront().slots[edgeSlotOf(k)].Store(s)
	return &s.e
}

// exactEdgeBits sizes the table of verdicts by the frames' own
// addresses (exactEdgeTable): 4,096 slots, direct-mapped.
const exactEdgeBits = 12

// exactEdgeTable is the verdicts looked up last by the exact addresses
// a check is asked of (the return address, the pc of the frame below and
// of the one under it), in front of the verdicts by callees: a warm
// caller then costs one probe, not the two extents of functions and the
// probe by their entries. An entry holds in the layout generation it was
// kept in and, when the verdict or an extent it was found by depended on
// JIT code, in the JIT generation and for the sample times of all of
// them. Entries are immutable; a colliding key replaces the slot's.
type exactEdgeTable struct {
	slots [1 << exactEdgeBits]atomic.Pointer[exactEdge]
}

type exactEdge struct {
	ra, below, under uint64
	gen, jitGen      uint64
	span             JITSpan
	jit              bool
	e                *edge // the callees' table's verdict, read in place
}

func exactSlotOf(ra, below, under uint64) uint64 {
	return mix3(ra, below, under) >> (64 - exactEdgeBits)
}

// exactEdges is the Process's table of verdicts by exact addresses.
func (p *Process) exactEdges() *exactEdgeTable { return madeOnce(&p.exact) }

// exactEdge is the verdict kept for the check of ra over the frames at
// below and under that holds for w's walk, or nil.
func (p *Process) exactEdge(ra, below, under uint64, w *walker) *edge {
	x := p.exactEdges().slots[exactSlotOf(ra, below, under)].Load()
	if x == nil || x.ra != ra || x.below != below || x.under != under || x.gen != w.gen {
		return nil
	}
	if x.jit && (x.jitGen != w.jitGen || !x.span.holds(w.t)) {
		return nil
	}
	return x.e
}

// keepExactEdge keeps e, kept by callees (edgeByCallees), for the check
// of ra over below and under, for as long as the verdict and the extents
// it was found by (w.dec) hold.
func (p *Process) keepExactEdge(ra, below, under uint64, w *walker, e *edge) {
	x := &exactEdge{ra: ra, below: below, under: under, gen: w.gen, jitGen: w.jitGen, span: w.dec.span, jit: w.dec.jit || e.jit, e: e}
	if e.jit {
		x.span = x.span.and(e.span)
	}
	if x.jit && !x.span.holds(w.t) {
		return
	}
	p.exactEdges().slots[exactSlotOf(ra, below, under)].Store(x)
}
