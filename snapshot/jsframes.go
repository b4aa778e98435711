package snapshot

import (
	"errors"

	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/model"
	v8 "github.com/stallwatch/stallwatch/runtimes/v8"
	"github.com/stallwatch/stallwatch/target"
)

// jsReader reads the JavaScript frames of a Node.js target's stacks, in
// place of the native frames V8's code runs them in: an anonymous JIT
// address ("[anon] 0x…") or the interpreter's trampoline becomes the
// function it runs (package runtimes/v8). It reads a stack while its
// thread is stopped (or blocked in the kernel): V8 moves objects only in
// a collection, which the stopped thread's isolate cannot be in.
type jsReader struct {
	v *target.V8
	r *v8.Reader
}

// newJSReader is the target's JavaScript reader; nil when it runs no V8
// (a V8 that cannot be read is noted).
func (tk *taker) newJSReader() *jsReader {
	if tk.tg == nil {
		return nil
	}
	v, err := tk.tg.V8()
	if err != nil {
		if !errors.Is(err, v8.ErrNotV8) {
			tk.note("JavaScript frames not read: %v", err)
		}
		return nil
	}
	return &jsReader{v: v, r: v8.NewReader(v.Layout, tk.tg.Memory())}
}

// jsFrame is the JavaScript of one native frame of a stack.
type jsFrame struct {
	index int // in the trace
	frame v8.Frame
}

// maxJSReads bounds the reads of the target's memory one stack's
// JavaScript frames may take, which lengthen its thread's stop: a frame
// costs a few pages of the heap (a 17-frame stack of Node.js's module
// loader, 42 reads), a deep recursion of one function hardly more.
const maxJSReads = 1024

// read reads the JavaScript frames of a trace, from the live process: its
// thread is stopped, or blocked. Frames past maxJSReads stay native; cut
// says how many.
func (j *jsReader) read(tr unwind.Trace) (out []jsFrame, cut int) {
	if j == nil {
		return nil, 0
	}
	j.r.Forget() // the target ran since the last stack
	for i, pc := range tr.PCs {
		if j.r.Reads() > maxJSReads {
			return out, len(tr.PCs) - i
		}
		if i >= len(tr.FPs) || tr.FPs[i] == 0 {
			continue
		}
		ret := i < len(tr.Exact) && !tr.Exact[i]
		code, ok := j.v.CodeAt(pc, ret)
		if !ok {
			continue
		}
		fr, err := j.r.Frame(v8.At{FP: tr.FPs[i], PC: pc, Return: ret, Code: code})
		if err != nil || fr.Kind == v8.Typed {
			continue
		}
		out = append(out, jsFrame{index: i, frame: fr})
	}
	return out, 0
}

// jsLocation is the location of a native frame that runs JavaScript: the
// same address and mapping, named by the functions it runs, innermost
// first (several where optimized code inlined them).
func jsLocation(native *model.Location, fr v8.Frame) *model.Location {
	loc := &model.Location{Addr: native.Addr, Mapping: native.Mapping, Kind: native.Kind}
	system := native.Name()
	for _, f := range fr.Functions {
		name := f.Name
		if name == "" {
			name = "(anonymous)"
		}
		loc.Lines = append(loc.Lines, model.Line{Function: name, SystemName: system, File: f.Script, Line: int64(f.Line)})
	}
	return loc
}

// jsAt is the JavaScript of frame index i, if it runs some.
func jsAt(frames []jsFrame, i int) (v8.Frame, bool) {
	for _, f := range frames {
		if f.index == i {
			return f.frame, true
		}
	}
	return v8.Frame{}, false
}

// readJS reads thread tid's JavaScript frames.
func (tk *taker) readJS(tid int, tr unwind.Trace) {
	frames, cut := tk.js.read(tr)
	tk.jsFrames[tid] = frames
	if cut > 0 {
		tk.note("thread %d: its last %d frames were not read for JavaScript: reading them would have taken more than %d reads of its memory while it was stopped", tid, cut, maxJSReads)
	}
}
