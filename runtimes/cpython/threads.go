package cpython

import (
	"errors"
	"fmt"
)

// Thread is one Python thread state.
type Thread struct {
	// Interpreter is the id of the interpreter it belongs to (0: the main one).
	Interpreter int64
	// State is the PyThreadState's address.
	State uint64
	// PthreadID is its thread_id: pthread_self() of the thread that runs it.
	PthreadID uint64
	// TID is the kernel's thread id (native_thread_id, 3.11+; from the
	// pthread structure before); 0 when it could not be learnt.
	TID int
	// HoldsGIL says the thread holds its interpreter's GIL.
	HoldsGIL bool
	// Frames are its Python frames, innermost first (Dump only).
	Frames []Frame
	// Err says why Frames ends before the thread's outermost frame: a
	// *ReadError, a *CorruptError, ErrTooDeep or ErrCycle; nil when the
	// walk is complete.
	Err error
}

// GIL is one global interpreter lock: the runtime's (3.8–3.11) or an
// interpreter's (3.12+; interpreters may share one).
type GIL struct {
	Addr uint64
	// Locked says a thread holds it; Holder is that thread's state (its
	// last_holder).
	Locked bool
	Holder uint64
	// Switches counts the times it changed hands (switch_number).
	Switches uint64
	// Cond and Mutex are the condition variable and mutex a thread
	// waiting for the GIL sleeps on (take_gil): a futex wait on an
	// address inside either is a wait for the GIL.
	Cond, Mutex Range
}

// Range is a span of the target's memory.
type Range struct{ Addr, Size uint64 }

// Contains says whether addr lies in the range.
func (r Range) Contains(addr uint64) bool { return addr >= r.Addr && addr-r.Addr < r.Size }

// Waits says whether a futex wait on addr is a wait for this GIL.
func (g GIL) Waits(addr uint64) bool { return g.Cond.Contains(addr) || g.Mutex.Contains(addr) }

// Dump is every Python thread of the target with its frames, and the
// GILs.
type Dump struct {
	Version Version
	Threads []Thread
	GILs    []GIL
}

// Bounds of a walk of the interpreter and thread lists.
const (
	maxInterpreters = 256
	// threadReads is the budget of reads per thread state listed.
	threadReads = 4
)

// ErrCycle ends a list that comes back to an element it had: the target
// changed it while it was read, or it is garbage.
var ErrCycle = errors.New("the list comes back on itself")

// ErrTooDeep ends a frame walk at Options.MaxDepth frames.
var ErrTooDeep = errors.New("deeper than the frame limit")

// interp is one interpreter state as listed.
type interp struct {
	addr uint64
	id   int64
	gil  uint64 // its GIL (3.12+); the runtime's before
}

// Threads lists every thread state of every interpreter, without their
// frames (which Frames reads): the cheap read that maps kernel thread ids
// to thread states.
func (rt *Runtime) Threads() ([]Thread, []GIL, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.r.reset(listReads(rt.opts))
	return rt.threads()
}

// listReads is the budget of reads of the interpreter and thread lists.
func listReads(o Options) int { return 16 + maxInterpreters*2 + o.MaxThreads*threadReads }

func (rt *Runtime) threads() ([]Thread, []GIL, error) {
	interps, err := rt.interpreters()
	if err != nil {
		return nil, nil, err
	}
	var out []Thread
	clear(rt.seen)
	for _, in := range interps {
		out, err = rt.threadsOf(in, out)
		if err != nil {
			return out, nil, err
		}
	}
	gils, err := rt.gils(interps)
	for i := range out {
		for _, g := range gils {
			if g.Locked && g.Holder == out[i].State {
				out[i].HoldsGIL = true
			}
		}
	}
	rt.matchTIDs(out)
	return out, gils, err
}

// interpreters walks _PyRuntime.interpreters.head.
func (rt *Runtime) interpreters() ([]interp, error) {
	l := rt.l
	rb, err := rt.r.structAt("_PyRuntime", rt.addr, fieldsEnd(l.RuntimeInterpretersHead), 8, nil)
	if err != nil {
		return nil, err
	}
	var out []interp
	seen := map[uint64]bool{}
	for p := u64(rb, l.RuntimeInterpretersHead); p != 0; {
		if seen[p] {
			return out, &CorruptError{What: "interpreter list", Addr: p, Detail: ErrCycle.Error()}
		}
		if len(out) >= maxInterpreters {
			return out, &CorruptError{What: "interpreter list", Addr: p, Detail: fmt.Sprintf("more than %d interpreters", maxInterpreters)}
		}
		seen[p] = true
		ib, err := rt.r.structAt("PyInterpreterState", p, fieldsEnd(l.InterpNext, l.InterpThreadsHead, l.InterpID, l.InterpGIL), 8, nil)
		if err != nil {
			return out, err
		}
		in := interp{addr: p, id: int64(u64(ib, l.InterpID))}
		if l.InterpGIL >= 0 {
			in.gil = u64(ib, l.InterpGIL)
		} else {
			in.gil = rt.addr + uint64(l.RuntimeGIL)
		}
		out = append(out, in)
		p = u64(ib, l.InterpNext)
	}
	if len(out) == 0 {
		return nil, ErrNotInitialized
	}
	return out, nil
}

// threadsOf appends the thread states of one interpreter.
func (rt *Runtime) threadsOf(in interp, out []Thread) ([]Thread, error) {
	l := rt.l
	ib, err := rt.r.structAt("PyInterpreterState", in.addr, fieldsEnd(l.InterpThreadsHead), 8, nil)
	if err != nil {
		return out, err
	}
	size := fieldsEnd(l.ThreadNext, l.ThreadInterp, l.ThreadFrame, l.ThreadID, l.ThreadNativeID)
	for ts := u64(ib, l.InterpThreadsHead); ts != 0; {
		if _, dup := rt.seen[ts]; dup {
			return out, &CorruptError{What: "thread state list", Addr: ts, Detail: ErrCycle.Error()}
		}
		if len(out) >= rt.opts.MaxThreads {
			return out, &CorruptError{What: "thread state list", Addr: ts, Detail: fmt.Sprintf("more than %d thread states", rt.opts.MaxThreads)}
		}
		rt.seen[ts] = struct{}{}
		tb, err := rt.r.structAt("PyThreadState", ts, size, 8, nil)
		if err != nil {
			return out, err
		}
		if got := u64(tb, l.ThreadInterp); got != in.addr {
			return out, &CorruptError{What: "PyThreadState", Addr: ts, Detail: fmt.Sprintf("interp %#x is not its interpreter %#x", got, in.addr)}
		}
		t := Thread{Interpreter: in.id, State: ts, PthreadID: u64(tb, l.ThreadID)}
		if l.ThreadNativeID >= 0 {
			t.TID = int(int32(u64(tb, l.ThreadNativeID)))
		}
		out = append(out, t)
		ts = u64(tb, l.ThreadNext)
	}
	return out, nil
}

// gils reads the GIL of each interpreter (one for all before 3.12).
func (rt *Runtime) gils(interps []interp) ([]GIL, error) {
	l := rt.l
	var out []GIL
	var errs []error
	for _, in := range interps {
		if in.gil == 0 || containsGIL(out, in.gil) {
			continue
		}
		b, err := rt.r.structAt("GIL (struct _gil_runtime_state)", in.gil, fieldsEnd(l.GILLastHolder, l.GILLocked, l.GILSwitchNumber), 8, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		g := GIL{
			Addr: in.gil, Locked: u32(b, l.GILLocked) != 0, Holder: u64(b, l.GILLastHolder), Switches: u64(b, l.GILSwitchNumber),
			Cond:  Range{in.gil + uint64(l.GILCond), uint64(l.GILCondSize)},
			Mutex: Range{in.gil + uint64(l.GILMutex), uint64(l.GILMutexSize)},
		}
		out = append(out, g)
	}
	return out, errors.Join(errs...)
}

func containsGIL(gs []GIL, addr uint64) bool {
	for _, g := range gs {
		if g.Addr == addr {
			return true
		}
	}
	return false
}

// matchTIDs fills in the kernel thread ids of thread states that do not
// hold them (3.8–3.10): the tid field of glibc's struct pthread, which
// pthread_self() (thread_id) points to, at the offset glibc's descriptor
// gives or, without it, at the one offset where every thread state's
// pthread structure holds one of Options.TIDs.
func (rt *Runtime) matchTIDs(ts []Thread) {
	if rt.l.ThreadNativeID >= 0 || len(ts) == 0 {
		return
	}
	if rt.tidOffset < 0 {
		rt.tidOffset = rt.calibrateTID(ts)
		if rt.tidOffset < 0 {
			return
		}
		rt.tidFrom = fmt.Sprintf("the offset %d in struct pthread where every thread state's tid was found", rt.tidOffset)
	}
	var b [4]byte
	for i := range ts {
		if rt.r.read(b[:], ts[i].PthreadID+uint64(rt.tidOffset)) == nil {
			ts[i].TID = int(int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24))
		}
	}
}

// maxPthreadScan bounds the search for the tid in struct pthread (glibc
// puts it at 720 on x86-64).
const maxPthreadScan = 2048

// calibrateTID finds the offset in struct pthread that holds, for every
// thread state, a distinct one of Options.TIDs; -1 when none does.
func (rt *Runtime) calibrateTID(ts []Thread) int64 {
	if len(rt.opts.TIDs) == 0 {
		return -1
	}
	tids := map[uint32]bool{}
	for _, t := range rt.opts.TIDs {
		tids[uint32(t)] = true
	}
	blocks := make([][]byte, len(ts))
	for i, t := range ts {
		b := make([]byte, maxPthreadScan)
		if rt.r.read(b, t.PthreadID) != nil {
			return -1
		}
		blocks[i] = b
	}
	for off := 0; off+4 <= maxPthreadScan; off += 4 {
		used := map[uint32]bool{}
		ok := true
		for _, b := range blocks {
			v := uint32(b[off]) | uint32(b[off+1])<<8 | uint32(b[off+2])<<16 | uint32(b[off+3])<<24
			if !tids[v] || used[v] {
				ok = false
				break
			}
			used[v] = true
		}
		if ok {
			return int64(off)
		}
	}
	return -1
}
