package objfile

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// GoRuntime is what a walk of a Go program's stacks needs to know of its
// runtime beyond the pclntab's frame sizes: where the runtime switches a
// thread to its system stack (g0) without a frame that leads back, and
// the frames a system stack starts with. Addresses are link-time.
//
// mcall (a goroutine parking: the scheduler runs on g0) and morestack (a
// goroutine's stack growing) set SP to g0.sched.sp and zero the frame
// pointer before they call: the function they call has no caller on any
// stack but g0's own bottom, which mstart1 recorded when the thread
// started (runtime/proc.go: "Set up m.g0.sched as a label returning to
// just after the mstart1 call in mstart0"). Below that position g0 holds
// mstart0's frame, called by mstart, the root frame of every thread the
// runtime starts. So a walk that reaches mcall or morestack goes on at
// g0.sched.pc in mstart0, then mstart: the system stack's whole chain.
// A C caller that calls back into Go (cgo) moves g0.sched.sp for the
// callback's duration; Cgo says whether the binary can.
type GoRuntime struct {
	// G0Switch are mcall and morestack.
	G0Switch []G0Switch
	// SchedPC is g0.sched.pc: the return address of the call of
	// runtime.mstart1 (in mstart0; in mstart before Go 1.17). 0 when the
	// call was not found.
	SchedPC uint64
	// StartPC is the return address of mstart's call of mstart0 (0
	// before Go 1.17, when mstart called mstart1 itself, or not found).
	StartPC uint64
	// Cgo: the binary has cgo's crosscall2, through which C calls Go.
	Cgo bool
	// AsyncPreempt is runtime.asyncPreempt, which a signal handler makes
	// the goroutine "call" from wherever it was interrupted: the return
	// address it leaves is the interrupted instruction, after no call.
	AsyncPreempt Range
}

// G0Switch is a function that calls its callee at g0.sched.sp, having
// pushed Pushed bytes there first (mcall: its callee's argument spill
// slot, in every Go since 1.17 and as the argument itself before;
// morestack: nothing). Its frame size in the pclntab also counts what it
// pushed on the goroutine's stack before it switched.
type G0Switch struct {
	Range
	Pushed uint64
}

// Range is a link-time address range [Lo, Hi).
type Range struct{ Lo, Hi uint64 }

// Contains reports whether pc is in r.
func (r Range) Contains(pc uint64) bool { return pc >= r.Lo && pc < r.Hi }

// maxRuntimeFunc bounds the code read of one runtime function.
const maxRuntimeFunc = 16 << 10

// GoRuntime returns what walks need to know of the file's Go runtime; nil
// without error for a file that is not a Go binary.
func (f *File) GoRuntime() (*GoRuntime, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rtDone {
		return f.rt, f.rtErr
	}
	g, err := f.goLocked()
	if err != nil || g == nil {
		return nil, err
	}
	if !f.readable() {
		return nil, ErrClosed
	}
	f.rtDone = true
	f.rtErr = safely(f.Name, func() error {
		f.rt = goRuntimeOf(g, f.readVirtual)
		return nil
	})
	return f.rt, f.rtErr
}

// goRuntimeOf finds the runtime's functions in g and the calls between
// them in its code (read reads link-time addresses).
func goRuntimeOf(g *GoTable, read func(vaddr uint64, n int) ([]byte, error)) *GoRuntime {
	rt := &GoRuntime{}
	for _, sw := range []struct {
		name   string
		pushed uint64
	}{{"runtime.mcall", 8}, {"runtime.morestack", 0}} {
		if lo, hi := g.findFunc(sw.name); hi > lo {
			rt.G0Switch = append(rt.G0Switch, G0Switch{Range{lo, hi}, sw.pushed})
		}
	}
	rt.Cgo = hasFunc(g, "crosscall2")
	rt.AsyncPreempt.Lo, rt.AsyncPreempt.Hi = g.findFunc("runtime.asyncPreempt")
	mstart1, _ := g.findFunc("runtime.mstart1")
	calls := func(name string) func(uint64) bool {
		// name, or its ABI wrapper (which has the same name in the
		// table, and jumps to it)
		return func(target uint64) bool {
			f, ok := g.funcFor(target)
			return ok && g.entry(f.i) == target && strings.TrimSuffix(f.name(), ".abi0") == name
		}
	}
	if rt.SchedPC = callSite(g, read, "runtime.mstart0", func(t uint64) bool { return t == mstart1 }); rt.SchedPC != 0 {
		if rt.StartPC = callSite(g, read, "runtime.mstart", calls("runtime.mstart0")); rt.StartPC == 0 {
			rt.SchedPC = 0 // half a chain is no chain
		}
	} else {
		rt.SchedPC = callSite(g, read, "runtime.mstart", func(t uint64) bool { return t == mstart1 })
	}
	return rt
}

// hasFunc reports whether the table has a function of that name.
func hasFunc(g *GoTable, name string) bool {
	lo, hi := g.findFunc(name)
	return hi > lo
}

// callSite returns the return address of the one direct call (E8 rel32)
// in the named function whose target to accepts; 0 when there is none or
// more than one.
func callSite(g *GoTable, read func(uint64, int) ([]byte, error), caller string, to func(target uint64) bool) uint64 {
	lo, hi := g.findFunc(caller)
	if hi <= lo || hi-lo > maxRuntimeFunc {
		return 0
	}
	code, err := read(lo, int(hi-lo))
	if err != nil {
		return 0
	}
	var found uint64
	for i := 0; i+5 <= len(code); i++ {
		if code[i] != 0xe8 {
			continue
		}
		next := lo + uint64(i) + 5
		if to(next + uint64(int64(int32(binary.LittleEndian.Uint32(code[i+1:]))))) {
			if found != 0 {
				return 0
			}
			found = next
		}
	}
	return found
}

// readVirtual reads n bytes at link-time address vaddr from the loadable
// segment holding them (f.mu held).
func (f *File) readVirtual(vaddr uint64, n int) ([]byte, error) {
	for _, p := range f.loads {
		if vaddr < p.Vaddr || vaddr-p.Vaddr >= p.Filesz || uint64(n) > p.Filesz-(vaddr-p.Vaddr) {
			continue
		}
		off := p.Off + (vaddr - p.Vaddr)
		if off > uint64(f.size) || uint64(n) > uint64(f.size)-off {
			break
		}
		b := make([]byte, n)
		if _, err := f.r.ReadAt(b, int64(off)); err != nil {
			return nil, fmt.Errorf("%s: read %d bytes at %#x: %w", f.Name, n, off, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%s: %#x+%d is in no loadable segment", f.Name, vaddr, n)
}
