package snapshot

import (
	"errors"
	"fmt"

	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes/cpython"
)

// pyThreads is what the snapshot knows of a CPython target: its runtime,
// each kernel thread's thread state, the GILs, and the Python frames read
// of each thread (under its stop when it had one).
type pyThreads struct {
	rt     *cpython.Runtime
	states map[int]uint64 // tid → PyThreadState
	gils   []cpython.GIL
	frames map[int][]cpython.Frame
	errs   map[int]error
}

// preparePython finds the target's CPython runtime and its thread states
// before any thread is stopped (reading them costs no stop).
func (tk *taker) preparePython() {
	if tk.tg == nil {
		return
	}
	rt, err := tk.tg.Python()
	if errors.Is(err, cpython.ErrNotPython) {
		return
	}
	if err != nil {
		tk.note("Python frames not read: %v", err)
		return
	}
	ts, gils, err := rt.Threads()
	if err != nil && len(ts) == 0 {
		tk.note("Python frames not read: CPython %s: %v", rt.Version(), err)
		return
	}
	py := &pyThreads{rt: rt, states: map[int]uint64{}, gils: gils, frames: map[int][]cpython.Frame{}, errs: map[int]error{}}
	for _, t := range ts {
		if t.TID != 0 {
			py.states[t.TID] = t.State
		}
	}
	if err != nil {
		tk.note("CPython %s: thread states read in part: %v", rt.Version(), err)
	}
	tk.py = py
}

// readPython reads thread tid's Python frames: called while the thread
// is stopped, or without a stop (then a running thread's frames may
// change while they are read: a walk cut short says why in its error).
func (tk *taker) readPython(tid int) {
	if tk.py == nil {
		return
	}
	state, ok := tk.py.states[tid]
	if !ok {
		return
	}
	// Code objects checked for one thread are not read again for the
	// next (their names are what a stop must not wait for).
	fs, err := tk.py.rt.FramesCached(state, nil)
	tk.py.frames[tid] = fs
	if err != nil {
		tk.py.errs[tid] = err
	}
}

// splicePython puts each thread's Python frames in place of its native
// evaluation frames.
func (tk *taker) splicePython(t *model.Thread) {
	if tk.py == nil {
		return
	}
	if err := tk.py.errs[t.TID]; err != nil {
		t.Err = errors.Join(t.Err, fmt.Errorf("reading its Python frames: %w", err))
	}
	fs := tk.py.frames[t.TID]
	if len(fs) == 0 {
		return
	}
	t.User, _ = tk.tg.SplicePython(t.User, fs)
}

// pythonWaits turns the futex waits on a GIL into waits for the thread
// holding it: threads waiting in take_gil sleep on the GIL's condition
// variable or mutex, which Debian's stripped python3 does not name.
func (tk *taker) pythonWaits() {
	if tk.py == nil {
		return
	}
	byState := map[uint64]int{}
	for tid, s := range tk.py.states {
		byState[s] = tid
	}
	for i := range tk.snap.Threads {
		t := &tk.snap.Threads[i]
		if t.Syscall == nil || t.Syscall.Nr != sysFutex {
			continue
		}
		for _, g := range tk.py.gils {
			if !g.Waits(t.Syscall.Args[0]) {
				continue
			}
			w := &model.Wait{Kind: "gil", Addr: t.Syscall.Args[0]}
			holder := byState[g.Holder]
			switch {
			case g.Locked && holder != 0 && holder != t.TID:
				w.Owner = holder
				w.Desc = fmt.Sprintf("CPython's GIL (%#x) held by tid %d", g.Addr, holder)
			default:
				w.Desc = fmt.Sprintf("CPython's GIL (%#x), changing hands", g.Addr)
			}
			t.Wait = w
		}
	}
	how := "while each thread was stopped"
	if !tk.snap.PtraceUsed {
		how = "without stopping the threads: a running thread's frames may have changed while they were read"
	}
	tk.note("CPython %s: Python frames read from the interpreter's memory %s", tk.py.rt.Version(), how)
	for _, g := range tk.py.gils {
		if tid := byState[g.Holder]; g.Locked && tid != 0 {
			tk.note("CPython %s: the GIL (%#x) is held by tid %d (read before the threads were stopped)", tk.py.rt.Version(), g.Addr, tid)
		}
	}
}
