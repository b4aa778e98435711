package v8

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Kind says what code a V8 frame runs.
type Kind uint8

const (
	// Typed: a frame V8 marks with its type instead of a function (entry,
	// exit, construct, stub, internal frames).
	Typed Kind = iota + 1
	// Interpreted: Ignition runs the function's bytecode; the frame
	// says which bytecode, so the line is known.
	Interpreted
	// Baseline: Sparkplug's code for the function's bytecode.
	Baseline
	// Optimized: Maglev's or Turbofan's code.
	Optimized
	// Builtin: one of V8's builtins written in its own languages
	// (Array.prototype.forEach, Promise's), built into the binary.
	Builtin
)

func (k Kind) String() string {
	switch k {
	case Typed:
		return "typed"
	case Interpreted:
		return "interpreted"
	case Baseline:
		return "baseline"
	case Optimized:
		return "optimized"
	case Builtin:
		return "builtin"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Frame is one V8 frame of a stack.
type Frame struct {
	Kind Kind
	// Type is V8's name of a typed frame's type ("EntryFrame",
	// "ExitFrame", "StubFrame", …; "" for a marker this build does not
	// name).
	Type string
	// Functions are the JavaScript functions a JavaScript frame runs,
	// innermost first: one, or, in optimized code, the function inlined
	// at the frame's pc, each caller it was inlined into, and last the
	// function compiled.
	Functions []Function
	// LineErr says why the frame's lines are not known, when they are
	// not; in optimized code whose tables could not be read it also
	// means the functions inlined there are not known.
	LineErr error
}

// Function is a JavaScript function as a stack trace names it.
type Function struct {
	// Name is V8's debug name: the function's name, else the one V8
	// inferred from where it was defined; "" for an anonymous function.
	Name string
	// Script is its script's name (a path, a URL, "node:internal/…"),
	// "" when it has none.
	Script string
	// Line and Column are where the frame is in it, from 1; 0 when not
	// known.
	Line, Column int
}

// Reader reads V8 frames and the objects they point to from a target's
// memory. It remembers the functions and scripts it read, keyed by what
// their objects held when read, so that a moved object is read again; a
// Reader belongs to one goroutine.
type Reader struct {
	l          *Layout
	h          heap
	functions  map[sfiKey]*function
	scripts    map[uint64]*script
	codes      map[codeKey]*code
	istreamMap uint64 // the InstructionStream map, once seen
}

// Forget drops what the Reader holds of the target's memory as it was:
// call it whenever the target may have run since the last Frame (before
// each stop of a thread). What it remembers of functions and scripts it
// checks against memory read afresh.
func (r *Reader) Forget() { r.h.forget() }

// Reads is how many reads of the target's memory the Reader made since
// it was made or last forgot: what a caller bounding the time a thread
// stays stopped counts.
func (r *Reader) Reads() int { return r.h.since }

// NewReader reads the memory of a process whose V8 has layout l.
func NewReader(l *Layout, mem Memory) *Reader {
	return &Reader{l: l, h: heap{l: l, mem: mem},
		functions: map[sfiKey]*function{}, scripts: map[uint64]*script{}, codes: map[codeKey]*code{}}
}

// Code says what code a pc is in, as far as the caller can tell.
type Code uint8

const (
	// CodeUnknown: in V8's binary, but whether in its builtins or in its
	// C++ is not known (a stripped binary). Only a frame that proves to
	// be interpreted (its context, function, BytecodeArray and bytecode
	// offset all check) is read: C++ keeps V8's objects on its stack too.
	CodeUnknown Code = iota
	// CodeBuiltins: in the builtins built into the binary (the
	// Builtins_* symbols): Ignition's handlers and the builtins written
	// in V8's own languages.
	CodeBuiltins
	// CodeJIT: in code V8 compiled at run time (anonymous executable
	// memory): Sparkplug's, Maglev's, Turbofan's.
	CodeJIT
)

// At is where a frame is: its frame pointer and the pc its code is at.
type At struct {
	FP, PC uint64
	// Return says PC is a return address (the frame's call is just
	// before it), not the next instruction to run.
	Return bool
	Code   Code
}

// Frame reads the V8 frame at at: a typed frame's type, or a JavaScript
// frame's functions, their scripts and lines. An error wrapping
// ErrNotFrame says the frame pointer's slots are not a V8 frame's.
func (r *Reader) Frame(at At) (Frame, error) {
	r.h.reset()
	fp := at.FP
	lo := min(r.l.fpMarker, r.l.fpFunction, r.l.fpBytecodeArray, r.l.fpBytecodeOffset)
	if lo >= 0 || lo < -256 || fp < uint64(-lo) {
		return Frame{}, fmt.Errorf("frame at %#x: %w", fp, ErrNotFrame)
	}
	var slots [256]byte
	b := slots[:-lo]
	if err := r.h.read("frame", b, fp-uint64(-lo)); err != nil {
		return Frame{}, fmt.Errorf("%w: %w", ErrNotFrame, err)
	}
	slot := func(off int64) uint64 { return binary.LittleEndian.Uint64(b[off-lo:]) }

	marker := slot(r.l.fpMarker)
	if r.l.isSmi(marker) {
		// A Smi in the context slot is a typed frame's marker.
		name, ok := r.l.frameTypes[marker]
		if !ok {
			return Frame{}, fmt.Errorf("frame at %#x: marker %#x: %w", fp, marker, ErrNotFrame)
		}
		return Frame{Kind: Typed, Type: name}, nil
	}
	if _, err := r.h.typed("Context", marker, r.l.typeContextFirst, r.l.typeContextLast); err != nil {
		return Frame{}, fmt.Errorf("frame at %#x: %w: %w", fp, ErrNotFrame, err)
	}
	fnObj, err := r.h.typed("JSFunction", slot(r.l.fpFunction), r.l.typeJSFunctionFirst, r.l.typeJSFunctionLast)
	if err != nil {
		return Frame{}, fmt.Errorf("frame at %#x: %w: %w", fp, ErrNotFrame, err)
	}
	bytecode, offset := slot(r.l.fpBytecodeArray), slot(r.l.fpBytecodeOffset)
	interpreted := at.Code != CodeJIT && r.isInterpreted(bytecode, offset)
	if at.Code == CodeUnknown && !interpreted {
		return Frame{}, fmt.Errorf("frame at %#x: in V8's binary but not interpreted: %w", fp, ErrNotFrame)
	}
	shared, err := r.h.field("JSFunction", fnObj, r.l.offJSFunctionShared)
	if err != nil {
		return Frame{}, err
	}
	f, err := r.sfi(shared)
	if err != nil {
		return Frame{}, fmt.Errorf("function of the frame at %#x: %w", fp, err)
	}
	fn := Function{Name: f.name}
	if f.script != nil {
		fn.Script = f.script.name
	}
	fr := Frame{Functions: []Function{fn}}
	switch {
	case interpreted:
		fr.Kind, fr.LineErr = Interpreted, errNoScript
		if f.script != nil {
			fr.Functions[0].Line, fr.Functions[0].Column, fr.LineErr = r.interpretedLine(f.script, bytecode, offset)
		}
		return fr, nil
	case at.Code == CodeBuiltins:
		fr.Kind, fr.LineErr = Builtin, errBuiltin
		return fr, nil
	}
	if r.l.code == nil {
		fr.Kind, fr.LineErr = r.slotKind(bytecode), r.l.codeErr
		return fr, nil
	}
	c, err := r.codeAt(at.PC, fnObj)
	if err != nil {
		fr.Kind, fr.LineErr = r.slotKind(bytecode), err
		return fr, nil
	}
	if c.baseline {
		fr.Kind, fr.LineErr = Baseline, errNoScript
		if f.script != nil {
			fr.Functions[0].Line, fr.Functions[0].Column, fr.LineErr = r.baselineLine(f.script, c, at.PC, bytecode)
		}
		return fr, nil
	}
	fr.Kind = Optimized
	fns, lineErr, err := r.optimizedFunctions(c, at.PC, at.Return)
	if err != nil {
		fr.LineErr = err
		return fr, nil
	}
	fr.Functions, fr.LineErr = fns, lineErr
	return fr, nil
}

// isInterpreted reports whether a frame's slots are an interpreted
// frame's: a BytecodeArray, and a bytecode offset in it (from the tagged
// pointer, as Ignition keeps it; -1 while the function is entered).
func (r *Reader) isInterpreted(bytecode, offset uint64) bool {
	obj, t, err := r.h.typeOf("BytecodeArray", bytecode)
	if err != nil || t != r.l.typeBytecodeArray || !r.l.isSmi(offset) {
		return false
	}
	n, err := r.h.field("BytecodeArray", obj, r.l.offArrayLength)
	off := r.l.smi(offset) - (r.l.offBytecodeData - int64(r.l.heapObjectTag))
	return err == nil && r.l.isSmi(n) && off >= -1 && off < r.l.smi(n)
}

// isBytecodeArray reports whether v points to a BytecodeArray.
func (r *Reader) isBytecodeArray(v uint64) bool {
	_, t, err := r.h.typeOf("BytecodeArray", v)
	return err == nil && t == r.l.typeBytecodeArray
}

// slotKind guesses a JIT frame's kind from its slots when its code
// cannot be read: Sparkplug's frames, like Ignition's, keep the
// BytecodeArray (so do frames that on-stack replacement entered).
func (r *Reader) slotKind(bytecode uint64) Kind {
	if r.isBytecodeArray(bytecode) {
		return Baseline
	}
	return Optimized
}

var errBuiltin = errors.New("a builtin: V8's own code, with no script")
var errNoScript = errors.New("the function has no script")

// interpretedLine finds the line of an interpreted frame: its bytecode
// offset, kept in the frame as an offset from the tagged BytecodeArray
// pointer.
func (r *Reader) interpretedLine(s *script, bytecode, rawOffset uint64) (line, col int, err error) {
	obj, _ := r.l.object(bytecode)
	off := r.l.smi(rawOffset) - (r.l.offBytecodeData - int64(r.l.heapObjectTag))
	return r.bytecodeLine(s, obj, off)
}

// bytecodeLine finds the line of bytecode offset off of the BytecodeArray
// at obj in its source position table.
func (r *Reader) bytecodeLine(s *script, obj uint64, off int64) (line, col int, err error) {
	spt, err := r.h.field("BytecodeArray", obj, r.l.offBytecodeSPT)
	if err != nil {
		return 0, 0, err
	}
	if _, t, err := r.h.typeOf("source position table", spt); err == nil && t != r.l.typeByteArray {
		// undefined until V8 needs them: it collects an interpreted
		// function's positions lazily (--enable-lazy-source-positions).
		return 0, 0, errLazyPositions
	}
	table, err := r.byteArray("source position table", spt)
	if err != nil {
		return 0, 0, err
	}
	p, err := positionAt(table, off)
	if err != nil {
		return 0, 0, err
	}
	return r.position(s, p.scriptOffset())
}

var errLazyPositions = errors.New("V8 has not collected the function's source positions (it does when a stack trace or a profiler needs them)")
