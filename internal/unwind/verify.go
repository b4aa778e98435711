package unwind

import "bytes"

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
	verdict edgeVerdict
	missing uint64 // edgeMissing: the return address inside T
	module  string // where the return address is, for the Cut
}

// edgeKey is a return address, the entry of the function it returned
// from and of the one under that (0: not known).
type edgeKey struct{ ra, callee, under uint64 }

// maxScannedFunc bounds the code of a call target scanned for its calls
// and jumps into the function below.
const maxScannedFunc = 256 << 10

// funcBounds returns the run-time range of the function holding pc (an
// exact address inside it: a return address minus one, or a sampled
// instruction pointer): from a Go binary's pclntab, a module's call frame
// information, or the JIT's records of its code.
func (w *walker) funcBounds(pc uint64) (lo, hi uint64, ok bool) {
	cr := w.find(pc)
	if cr == nil {
		return 0, 0, false
	}
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
	if cr.anon && w.jit != nil {
		if f, ok := w.jit.(JITFuncs); ok {
			return f.FuncAt(pc, w.t)
		}
	}
	return 0, 0, false
}

// inAsyncPreempt reports whether pc (exact) is in runtime.asyncPreempt.
func (w *walker) inAsyncPreempt(pc uint64) bool {
	cr := w.find(pc)
	return cr != nil && cr.gort != nil && cr.gort.AsyncPreempt.Contains(pc-cr.bias)
}

// JITFuncs is what a JITCode may also know: the code range of the JIT
// function live at pc at time t (0: the latest), which checks the calls
// into it.
type JITFuncs interface {
	FuncAt(pc, t uint64) (lo, hi uint64, ok bool)
}

// checkEdge says whether ra can be the return address of the frame whose
// code holds below (an exact address in it); under, when not 0, is an
// exact address in the frame under that one. Verdicts over file code are
// cached per return address and callees; JIT code's are not (code at one
// address changes).
func (w *walker) checkEdge(ra, below, under uint64) edge {
	if ra < 2 || w.find(ra-1) == nil {
		return edge{verdict: edgeNotExecutable}
	}
	if w.goOutermost(ra) {
		// runtime.goexit's planted return address follows a NOP: it
		// is every goroutine's first frame.
		return edge{}
	}
	if w.inAsyncPreempt(below) {
		// Injected by a preemption signal: it returns to the
		// instruction the signal interrupted, which no call precedes.
		return edge{}
	}
	calleeLo, calleeHi, known := w.funcBounds(below)
	if cr := w.find(below); !known && (cr == nil || cr.anon) {
		// JIT code nobody describes (or mapped since the maps were
		// read): no direct call reaches it (its extent is taken as
		// empty), a jump through a pointer may.
		calleeLo, calleeHi, known = below, below, true
	}
	var underLo uint64
	if under != 0 {
		underLo, _, _ = w.funcBounds(under)
	}
	key := edgeKey{ra: ra, callee: calleeLo, under: underLo}
	cache := w.proc != nil && !w.find(ra-1).anon
	if cr := w.find(below); known && (cr == nil || cr.anon) {
		cache = false
	}
	if cache {
		if e, ok := w.proc.cachedEdge(key); ok {
			return e
		}
	}
	e := w.decideEdge(ra, calleeLo, calleeHi, known, underLo)
	e.module = moduleName(w.find(ra - 1))
	if cache {
		w.proc.keepEdge(key, e)
	}
	return e
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
			if v, ok := readU64(w.codeMem(), a); ok && v == fn {
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
	if _, err := w.codeMem().ReadAt(code, lo); err == nil {
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
	if _, err := w.codeMem().ReadAt(b[:], pc); err != nil {
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
	if _, err := w.codeMem().ReadAt(b[:], start); err != nil {
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
	if _, err := w.codeMem().ReadAt(b, ra-n); err != nil {
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
func edgeCut(e edge, ra uint64) Cut {
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

func (p *Process) cachedEdge(k edgeKey) (edge, bool) {
	p.raMu.Lock()
	e, ok := p.edges[k]
	p.raMu.Unlock()
	return e, ok
}

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

func (p *Process) keepEdge(k edgeKey, e edge) {
	p.raMu.Lock()
	if len(p.edges) >= maxCachedEdges {
		clear(p.edges)
	}
	p.edges[k] = e
	p.raMu.Unlock()
}
