package v8

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// code is an optimized Code object, what a frame running it needs.
type code struct {
	obj         uint64 // untagged
	start, size uint64 // its instructions
	kind        uint32
	baseline    bool
	spt         []byte   // source position table (baseline: bytecode offset table)
	sfi         uint64   // the function compiled (tagged)
	inlining    []byte   // InliningPosition entries
	literals    []uint64 // the inlined functions' SharedFunctionInfos (tagged)
}

// maxScanBack bounds how far below a pc the start of its code is looked
// for: Turbofan's largest functions are a few hundred kilobytes.
const maxScanBack = 256 << 10

// maxInlined bounds the inlined functions of one Code read.
const maxInlined = 1 << 12

// errNoCode is wrapped when the code holding a pc cannot be found.
var errNoCode = errors.New("no Code holds the pc")

// codeAt finds the optimized Code whose instructions hold pc: the
// frame's function's current code when it is that, else the Code the
// InstructionStream below pc belongs to (on-stack-replaced code, and code
// the function has since replaced).
func (r *Reader) codeAt(pc, fnObj uint64) (*code, error) {
	cl := r.l.code
	if v, err := r.h.field("JSFunction", fnObj, cl.offJSFunctionCode); err == nil {
		if c, err := r.codeHeader(v); err == nil && pc >= c.start && pc-c.start < c.size {
			return r.codeTables(c)
		}
	}
	istream, err := r.findIStream(pc)
	if err != nil {
		return nil, err
	}
	v, err := r.h.word("InstructionStream", istream+uint64(cl.offIStreamCode))
	if err != nil {
		return nil, err
	}
	c, err := r.codeHeader(v)
	if err != nil {
		return nil, err
	}
	if c.start != istream+uint64(cl.offIStreamStart) || pc < c.start || pc-c.start >= c.size {
		return nil, fmt.Errorf("pc %#x: the Code at %#x does not hold it: %w", pc, c.obj, errNoCode)
	}
	return r.codeTables(c)
}

// codeHeader reads a Code object's instructions and kind, and checks that
// its InstructionStream belongs to it.
func (r *Reader) codeHeader(v uint64) (*code, error) {
	cl := r.l.code
	obj, err := r.h.typed("Code", v, cl.typeCode, cl.typeCode)
	if err != nil {
		return nil, err
	}
	var hdr [96]byte
	b := hdr[:cl.offSize+4]
	if err := r.h.read("Code", b, obj); err != nil {
		return nil, err
	}
	c := &code{obj: obj,
		start: binary.LittleEndian.Uint64(b[cl.offStart:]),
		size:  uint64(binary.LittleEndian.Uint32(b[cl.offSize:])),
		kind:  binary.LittleEndian.Uint32(b[cl.offFlags:]) & cl.kindMask >> cl.kindShift,
	}
	c.baseline = c.kind == cl.kindBaseline
	is := binary.LittleEndian.Uint64(b[cl.offIStream:])
	isObj, ok := r.l.object(is)
	if !ok || c.size == 0 || c.size > 64<<20 || c.start != isObj+uint64(cl.offIStreamStart) {
		// Builtins' Code points into the embedded blob: not code this
		// reader reads.
		return nil, fmt.Errorf("the Code at %#x: instructions at %#x not in its InstructionStream: %w", obj, c.start, errNoCode)
	}
	if back, err := r.h.word("InstructionStream", isObj+uint64(cl.offIStreamCode)); err != nil || back != v {
		return nil, fmt.Errorf("the Code at %#x: its InstructionStream belongs to %#x: %w", obj, back, errNoCode)
	}
	if r.istreamMap == 0 {
		r.istreamMap, _ = r.h.word("InstructionStream", isObj+uint64(r.l.offMap))
	}
	return c, nil
}

// findIStream scans down from pc, a page at a time, for the
// InstructionStream holding it: the nearest word below pc that is the
// InstructionStream map. The map is learnt from the first Code read
// whole; until then, candidates are checked by type, a bounded number.
func (r *Reader) findIStream(pc uint64) (uint64, error) {
	const page = 4096
	var buf [page]byte
	checks := 0
	for base := pc &^ (page - 1); pc-base < maxScanBack && base > 0; base -= page {
		if err := r.h.read("code", buf[:], base); err != nil {
			return 0, fmt.Errorf("pc %#x: %w: %w", pc, errNoCode, err)
		}
		i := page - 8
		if base+page > pc {
			i = int(pc-base) &^ 7
		}
		for ; i >= 0; i -= 8 {
			w := binary.LittleEndian.Uint64(buf[i:])
			at := base + uint64(i)
			if r.istreamMap != 0 {
				if w == r.istreamMap {
					return at, nil
				}
				continue
			}
			if _, ok := r.l.object(w); !ok || checks >= maxBootstrapChecks {
				continue
			}
			checks++
			if _, t, err := r.h.typeOf("InstructionStream", at|r.l.heapObjectTag); err == nil && t == r.l.code.typeIStream {
				return at, nil
			}
		}
	}
	return 0, fmt.Errorf("pc %#x: no InstructionStream within %d bytes below it: %w", pc, maxScanBack, errNoCode)
}

// maxBootstrapChecks bounds the words checked by type while the
// InstructionStream map is not known yet.
const maxBootstrapChecks = 256

// codeTables reads a Code's source positions and what it inlined, once
// per Code object as it stands.
func (r *Reader) codeTables(c *code) (*code, error) {
	key := codeKey{obj: c.obj, start: c.start, size: c.size}
	if have, ok := r.codes[key]; ok {
		return have, nil
	}
	cl := r.l.code
	spt, err := r.h.field("Code", c.obj, cl.offSPT)
	if err != nil {
		return nil, err
	}
	// Sparkplug's Code keeps its bytecode offset table in the same field.
	if c.spt, err = r.byteArray("source position table", spt); err != nil {
		return nil, err
	}
	if c.baseline {
		return r.remember(key, c), nil
	}
	dd, err := r.h.field("Code", c.obj, cl.offDeopt)
	if err != nil {
		return nil, err
	}
	deopt, err := r.fixedArray("deoptimization data", dd, cl.deoptInlining+1)
	if err != nil {
		return nil, err
	}
	if int64(len(deopt)) <= cl.deoptInlining {
		return nil, &ReadError{What: "deoptimization data", Addr: dd, Err: fmt.Errorf("%d entries", len(deopt))}
	}
	c.sfi = deopt[cl.deoptSFI]
	n := deopt[cl.deoptInlinedCount]
	if !r.l.isSmi(n) || r.l.smi(n) < 0 || r.l.smi(n) > maxInlined {
		return nil, &ReadError{What: "deoptimization data", Addr: dd, Err: fmt.Errorf("inlined function count %#x", n)}
	}
	if r.l.smi(n) > 0 {
		if c.literals, err = r.fixedArray("deoptimization literals", deopt[cl.deoptLiterals], r.l.smi(n)); err != nil {
			return nil, err
		}
		if int64(len(c.literals)) < r.l.smi(n) {
			return nil, &ReadError{What: "deoptimization literals", Addr: deopt[cl.deoptLiterals], Err: fmt.Errorf("%d entries for %d inlined functions", len(c.literals), r.l.smi(n))}
		}
		if c.inlining, err = r.byteArray("inlining positions", deopt[cl.deoptInlining]); err != nil {
			return nil, err
		}
	}
	return r.remember(key, c), nil
}

// remember keeps a Code read.
func (r *Reader) remember(key codeKey, c *code) *code {
	if len(r.codes) >= maxCachedCodes {
		clear(r.codes)
	}
	r.codes[key] = c
	return c
}

// codeKey identifies a Code object as it stands.
type codeKey struct{ obj, start, size uint64 }

// maxCachedCodes bounds the Code objects a Reader remembers.
const maxCachedCodes = 1 << 12

// fixedArray reads at most max entries of the FixedArray or
// WeakFixedArray v points to.
func (r *Reader) fixedArray(what string, v uint64, max int64) ([]uint64, error) {
	obj, t, err := r.h.typeOf(what, v)
	if err != nil {
		return nil, err
	}
	if t != r.l.typeFixedArray && t != r.l.code.typeWeakFixedArray {
		return nil, &TypeError{What: what, Addr: v, Type: t}
	}
	n, err := r.h.field(what, obj, r.l.offArrayLength)
	if err != nil {
		return nil, err
	}
	if !r.l.isSmi(n) || r.l.smi(n) < 0 || r.l.smi(n) > 1<<20 {
		return nil, &ReadError{What: what, Addr: obj, Err: fmt.Errorf("length %#x", n)}
	}
	count := min(r.l.smi(n), max)
	b, err := r.h.readBytes(what, obj+uint64(r.l.offArrayData), int(8*count))
	if err != nil {
		return nil, err
	}
	out := make([]uint64, count)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return out, nil
}

// weakTarget is the strong form of a weak reference (V8 marks one with
// both low bits set; 3 alone is a cleared one).
func (l *Layout) weakTarget(v uint64) uint64 {
	if v&3 == 3 && v != 3 {
		return v &^ 2
	}
	return v
}

// inliningPosition is V8's InliningPosition: where the function was
// inlined (a SourcePosition in its caller) and which literal it is.
func inliningPosition(b []byte, id int) (sourcePosition, int, bool) {
	const size = 16
	if id < 0 || id >= len(b)/size {
		return 0, 0, false
	}
	e := b[id*size:]
	return sourcePosition(binary.LittleEndian.Uint64(e)), int(int32(binary.LittleEndian.Uint32(e[8:]))), true
}

// optimizedFunctions names the functions at pc in optimized code,
// innermost first: the function inlined there, each caller it was
// inlined into, the function compiled last; each at its position.
// lineErr says why a line is missing where one is.
func (r *Reader) optimizedFunctions(c *code, pc uint64, ret bool) (fns []Function, lineErr, err error) {
	off := int64(pc - c.start)
	if ret && off > 0 {
		off-- // a return address: the call is before it
	}
	pos, err := positionAt(c.spt, off)
	if err != nil {
		return nil, nil, err
	}
	var out []Function
	id := pos.inliningID()
	for range len(c.inlining)/16 + 1 {
		sfiV := c.sfi
		if id >= 0 {
			_, lit, ok := inliningPosition(c.inlining, id)
			if !ok || lit < 0 || lit >= len(c.literals) {
				return nil, nil, fmt.Errorf("inlining id %d: no inlined function", id)
			}
			sfiV = r.l.weakTarget(c.literals[lit])
		}
		f, err := r.sfi(sfiV)
		if err != nil {
			return nil, nil, err
		}
		fn := Function{Name: f.name}
		if f.script == nil && lineErr == nil {
			lineErr = errNoScript
		}
		if f.script != nil {
			fn.Script = f.script.name
			var e error
			if fn.Line, fn.Column, e = r.position(f.script, pos.scriptOffset()); e != nil && lineErr == nil {
				lineErr = e
			}
		}
		out = append(out, fn)
		if id < 0 {
			return out, lineErr, nil
		}
		pos, _, _ = inliningPosition(c.inlining, id)
		id = pos.inliningID()
	}
	return nil, nil, fmt.Errorf("inlining chain longer than its %d entries", len(c.inlining)/16)
}
