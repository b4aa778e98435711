package cpython

import (
	"fmt"
)

// Frame is one Python frame.
type Frame struct {
	// Function is the code object's qualified name (co_qualname, 3.11+:
	// "Ledger.settle.<locals>.check"), or its co_name before 3.11.
	Function string
	File     string // co_filename
	// Line is the line being run, as the frame's f_lineno says; 0 when
	// the line table gives none (or could not be read).
	Line int
	// Entry marks the outermost frame of those one call of the
	// interpreter's evaluation function (_PyEval_EvalFrameDefault) runs:
	// before 3.11 each frame has its own call; since, a call runs the
	// Python functions its frames call without a C call of its own. The
	// frames up to the first Entry, innermost first, are those of the
	// innermost evaluation call on the native stack, and so on.
	Entry bool
	// Starting marks an Entry frame that has not run its first
	// instruction (3.11+): Python's own tracebacks do not show it yet.
	Starting bool
	// Code is the code object's address.
	Code uint64
}

func (f Frame) String() string {
	return fmt.Sprintf("%s (%s:%d)", f.Function, f.File, f.Line)
}

// Frame owners of 3.11+ (enum _frameowner, pycore_frame.h).
const (
	ownedByThread    = 0
	ownedByGenerator = 1
	ownedByMaxKnown  = 3 // FRAME_OWNED_BY_CSTACK (3.12+)
)

// frameReads is the budget of reads per frame: the frame and its code
// object (and, for code not seen before, its names and line table).
const frameReads = 8

// Frames reads the Python frames of the thread whose state is at state,
// innermost first, appending them to dst. On an error it returns the
// frames read before it: a *ReadError, a *CorruptError, ErrTooDeep or
// ErrCycle (wrapped in a *CorruptError) says why the walk ended early.
func (rt *Runtime) Frames(state uint64, dst []Frame) ([]Frame, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.r.reset(16 + rt.opts.MaxDepth*frameReads)
	return rt.frames(state, dst, false)
}

// FramesCached is Frames for readers of many walks in a row (a sampler at
// each sample, a snapshot thread after thread): code objects checked in
// the last second are not read again (see codeTrust), so that a walk
// costs the reads of the thread state and its frames (a page or two).
func (rt *Runtime) FramesCached(state uint64, dst []Frame) ([]Frame, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.r.reset(16 + rt.opts.MaxDepth*frameReads)
	return rt.frames(state, dst, true)
}

// Dump reads every thread state, its frames, and the GILs. Each thread
// is read as it stands at the time its walk reaches it; the whole Dump
// has one budget of reads and allocation.
func (rt *Runtime) Dump() (*Dump, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.r.reset(listReads(rt.opts))
	ts, gils, err := rt.threads()
	d := &Dump{Version: rt.version, Threads: ts, GILs: gils}
	if len(ts) == 0 && err != nil {
		return d, err
	}
	rt.r.budget += len(ts) * (16 + rt.opts.MaxDepth*frameReads)
	for i := range d.Threads {
		d.Threads[i].Frames, d.Threads[i].Err = rt.frames(d.Threads[i].State, nil, false)
	}
	return d, err
}

// frames walks one thread's frames within the reader's current budget;
// trust: see FramesCached.
func (rt *Runtime) frames(state uint64, dst []Frame, trust bool) ([]Frame, error) {
	l := rt.l
	tb, err := rt.r.structAt("PyThreadState", state, fieldsEnd(l.ThreadFrame), 8, rt.frameBuf[:0])
	if err != nil {
		return dst, err
	}
	f := u64(tb, l.ThreadFrame)
	if l.CFrameCurrentFrame >= 0 && f != 0 {
		// 3.11, 3.12: a _PyCFrame on the C stack of the innermost
		// evaluation call points to its current frame.
		cb, err := rt.r.structAt("_PyCFrame", f, fieldsEnd(l.CFrameCurrentFrame), 8, rt.frameBuf[:0])
		if err != nil {
			return dst, err
		}
		f = u64(cb, l.CFrameCurrentFrame)
	}
	clear(rt.seen)
	start := len(dst)
	if l.FrameInstr < 0 {
		dst, err = rt.frameObjects(f, dst, trust)
	} else {
		dst, err = rt.interpreterFrames(f, dst, trust)
	}
	return dropStarting(dst, start), err
}

// visit bounds a walk and finds its cycles: at most MaxDepth frames are
// kept (frames, the number kept so far), and at most twice as many links
// followed (3.12+ puts a shim frame below each evaluation call's first).
func (rt *Runtime) visit(what string, f uint64, frames, links int) error {
	if frames >= rt.opts.MaxDepth || links >= 2*rt.opts.MaxDepth+2 {
		return ErrTooDeep
	}
	if _, dup := rt.seen[f]; dup {
		return &CorruptError{What: what + " chain", Addr: f, Detail: ErrCycle.Error()}
	}
	rt.seen[f] = struct{}{}
	return nil
}

// frameObjects walks 3.8–3.10 PyFrameObjects from f by f_back: each is
// run by its own evaluation call.
func (rt *Runtime) frameObjects(f uint64, dst []Frame, trust bool) ([]Frame, error) {
	l := rt.l
	start := len(dst)
	for links := 0; f != 0; links++ {
		if err := rt.visit("frame", f, len(dst)-start, links); err != nil {
			return dst, err
		}
		b, err := rt.r.structAt("frame object", f, l.FrameSize, 8, rt.frameBuf[:0])
		if err != nil {
			return dst, err
		}
		if err := rt.checkType("frame object", f, u64(b, offObType), rt.types.frame, "frame"); err != nil {
			return dst, err
		}
		code, back := u64(b, l.FrameCode), u64(b, l.FrameBack)
		lasti := int(int32(u32(b, l.FrameLasti)))
		c, err := rt.code(code, trust)
		if err != nil {
			return dst, err
		}
		addr := lasti // 3.8, 3.9: a byte offset
		if l.LineTable == LineTable310 && lasti >= 0 {
			addr = lasti * codeUnitBytes // 3.10: in code units
		}
		dst = append(dst, Frame{Function: c.function, File: c.file, Line: c.line(rt.l.LineTable, addr), Entry: true, Code: code})
		f = back
	}
	return dst, nil
}

// interpreterFrames walks 3.11+ _PyInterpreterFrames from f by previous.
func (rt *Runtime) interpreterFrames(f uint64, dst []Frame, trust bool) ([]Frame, error) {
	l := rt.l
	start := len(dst)
	for links := 0; f != 0; links++ {
		if err := rt.visit("_PyInterpreterFrame", f, len(dst)-start, links); err != nil {
			return dst, err
		}
		b, err := rt.r.structAt("_PyInterpreterFrame", f, l.FrameSize, 8, rt.frameBuf[:0])
		if err != nil {
			return dst, err
		}
		owner := int64(u8(b, l.FrameOwner))
		code, prev, instr := u64(b, l.FrameCode), u64(b, l.FrameBack), u64(b, l.FrameInstr)
		if owner > ownedByMaxKnown {
			return dst, &CorruptError{What: "_PyInterpreterFrame", Addr: f, Detail: fmt.Sprintf("owner %d", owner)}
		}
		if owner == l.OwnedByCStack {
			// 3.12+: the shim an evaluation call pushes below its first
			// frame: that frame is the call's entry.
			if len(dst) > 0 {
				dst[len(dst)-1].Entry = true
			}
			f = prev
			continue
		}
		if code == rt.none && rt.none != 0 {
			f = prev
			continue
		}
		entry := l.FrameIsEntry >= 0 && u8(b, l.FrameIsEntry) != 0
		c, err := rt.code(code, trust)
		if err != nil {
			return dst, err
		}
		// The instruction's byte offset; 3.11's prev_instr is one code
		// unit before the first instruction in a frame not yet started.
		off := int64(instr - (code + uint64(l.CodeAdaptive)))
		if inside := off >= -codeUnitBytes && off < c.units*codeUnitBytes; !inside && trust {
			// Not in the code remembered: read it again.
			if c, err = rt.code(code, false); err != nil {
				return dst, err
			}
		}
		fr := Frame{Function: c.function, File: c.file, Code: code, Entry: entry}
		if off >= -codeUnitBytes && off < c.units*codeUnitBytes {
			fr.Line = c.line(l.LineTable, int(max(off, -1)))
		}
		if owner != ownedByGenerator && off/codeUnitBytes < c.firstTraceable {
			fr.Starting = true
		}
		dst = append(dst, fr)
		f = prev
	}
	return dst, nil
}

// dropStarting removes from dst[start:] the frames that have not started
// and are not an evaluation call's entry: Python's tracebacks skip them,
// and they mark no native frame.
func dropStarting(dst []Frame, start int) []Frame {
	out := dst[:start]
	for _, f := range dst[start:] {
		if f.Starting && !f.Entry {
			continue
		}
		out = append(out, f)
	}
	return out
}

// line is the line at byte offset addr (0: none).
func (c *codeInfo) line(f LineTableFormat, addr int) int {
	if c.tableErr != nil && addr >= 0 {
		return 0
	}
	line, ok := addr2line(f, c.table, int(c.key.firstLine), addr)
	if !ok || line < 0 {
		return 0
	}
	return line
}

// Calls splits a thread's frames (innermost first) into those of each
// call of the evaluation function, innermost first: a native stack's
// frames in EvalFunctions, innermost first, stand for these calls one to
// one. Frames outer to the last Entry (a walk cut short) make a last
// call of their own.
func Calls(frames []Frame) [][]Frame {
	var out [][]Frame
	start := 0
	for i, f := range frames {
		if f.Entry {
			out = append(out, frames[start:i+1])
			start = i + 1
		}
	}
	if start < len(frames) {
		out = append(out, frames[start:])
	}
	return out
}
