package v8

import (
	"errors"
	"fmt"
)

// Sparkplug compiles a function's bytecodes one after the other, and its
// Code keeps, in place of a source position table, a bytecode offset
// table (src/baseline/bytecode-offset-iterator.h): for each bytecode in
// order, the unsigned VLQ size of the machine code compiled for it, the
// first (before any bytecode) being the prologue's. A pc's bytecode is
// the one whose code holds it, as Code::GetBytecodeOffsetForBaselinePC
// finds it; its position then comes from the BytecodeArray as for an
// interpreted frame.

// maxBytecodes bounds a BytecodeArray read (V8 limits a function's
// bytecode to far less).
const maxBytecodes = 4 << 20

// prefixScales are the operand-scaling prefix bytecodes (Wide,
// ExtraWide, DebugBreakWide, DebugBreakExtraWide: the first four of
// src/interpreter/bytecodes.h) and the row of kBytecodeSizes they select.
var prefixScales = [4]int{1, 2, 1, 2}

// uvlq decodes one unsigned variable-length integer at b[*i:].
func uvlq(b []byte, i *int) (uint64, error) {
	var u uint64
	for shift := uint(0); ; shift += 7 {
		if *i >= len(b) || shift > 63 {
			return 0, errTruncated
		}
		c := b[*i]
		*i++
		u |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return u, nil
		}
	}
}

// bytecodeSize is the size of the bytecode at b[0:] with its prefix.
func (l *Layout) bytecodeSize(b []byte) (int, error) {
	count := len(l.bytecodeSizes) / 3
	if len(b) == 0 {
		return 0, errTruncated
	}
	op, row, prefix := int(b[0]), 0, 0
	if op < len(prefixScales) {
		if len(b) < 2 {
			return 0, errTruncated
		}
		op, row, prefix = int(b[1]), prefixScales[op], 1
	}
	if op >= count {
		return 0, fmt.Errorf("bytecode %#x of %d", op, count)
	}
	return prefix + int(l.bytecodeSizes[row*count+op]), nil
}

// baselineOffset is the bytecode offset of baseline pc offset pcOff.
func (l *Layout) baselineOffset(table, bytecodes []byte, pcOff uint64) (int64, error) {
	i := 0
	end, err := uvlq(table, &i)
	if err != nil {
		return 0, err
	}
	cur, next := int64(-1), 0 // the prologue, before the first bytecode
	for end < pcOff {
		d, err := uvlq(table, &i)
		if err != nil {
			return 0, err
		}
		if next >= len(bytecodes) {
			return 0, fmt.Errorf("pc offset %d past the code of the last bytecode", pcOff)
		}
		size, err := l.bytecodeSize(bytecodes[next:])
		if err != nil {
			return 0, err
		}
		cur, next = int64(next), next+size
		end += d
	}
	return cur, nil
}

var errNoBytecodeSizes = errors.New("baseline (Sparkplug) code: the binary has no table of bytecode sizes to map its pc to a bytecode")

// baselineLine finds the line of a frame at pc in baseline code c.
func (r *Reader) baselineLine(s *script, c *code, pc, bytecode uint64) (line, col int, err error) {
	if r.l.bytecodeSizes == nil {
		return 0, 0, errNoBytecodeSizes
	}
	obj, err := r.h.typed("BytecodeArray", bytecode, r.l.typeBytecodeArray, r.l.typeBytecodeArray)
	if err != nil {
		return 0, 0, err
	}
	bcs, err := r.bytecodes(obj)
	if err != nil {
		return 0, 0, err
	}
	off, err := r.l.baselineOffset(c.spt, bcs, pc-c.start)
	if err != nil {
		return 0, 0, err
	}
	return r.bytecodeLine(s, obj, off)
}

// bytecodes reads a BytecodeArray's bytecodes.
func (r *Reader) bytecodes(obj uint64) ([]byte, error) {
	n, err := r.h.field("BytecodeArray", obj, r.l.offArrayLength)
	if err != nil {
		return nil, err
	}
	if !r.l.isSmi(n) || r.l.smi(n) < 0 || r.l.smi(n) > maxBytecodes {
		return nil, &ReadError{What: "BytecodeArray", Addr: obj, Err: fmt.Errorf("length %#x", n)}
	}
	return r.h.readBytes("bytecodes", obj+uint64(r.l.offBytecodeData), int(r.l.smi(n)))
}
