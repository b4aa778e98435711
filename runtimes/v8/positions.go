package v8

import (
	"errors"
	"fmt"
)

// A source position table (src/codegen/source-position-table.cc) is a
// sequence of entries, each two zig-zag VLQ integers: the code offset's
// delta from the entry before (negated minus one when the position is
// not a statement's) and the source position's delta. Code offsets start
// at kFunctionEntryBytecodeOffset (-1), positions at 0. A position is
// V8's SourcePosition: bit 0 says it is external (a line in another
// file: not JavaScript), bits 1–30 hold the script offset plus one,
// bits 31–46 the inlining id plus one.

// maxPositionTable bounds a table read (a function of 10,000 lines has a
// table of some 100 KB).
const maxPositionTable = 4 << 20

var errTruncated = errors.New("truncated")

// vlq decodes one zig-zag variable-length integer at b[*i:].
func vlq(b []byte, i *int) (int64, error) {
	var u uint64
	for shift := uint(0); ; shift += 7 {
		if *i >= len(b) || shift > 63 {
			return 0, errTruncated
		}
		c := b[*i]
		*i++
		u |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			break
		}
	}
	return int64(u>>1) ^ -int64(u&1), nil
}

// sourcePosition is V8's SourcePosition word.
type sourcePosition uint64

func (p sourcePosition) external() bool      { return p&1 != 0 }
func (p sourcePosition) scriptOffset() int64 { return int64(p>>1&(1<<30-1)) - 1 }
func (p sourcePosition) inliningID() int     { return int(p>>31&(1<<16-1)) - 1 }

// positionAt is the source position of code offset off in a table: that
// of the last JavaScript entry at or before it (AbstractCode::SourcePosition).
func positionAt(table []byte, off int64) (sourcePosition, error) {
	code, pos := int64(-1), int64(0)
	var found sourcePosition
	have := false
	for i := 0; i < len(table); {
		d, err := vlq(table, &i)
		if err != nil {
			return 0, err
		}
		if d < 0 {
			d = -(d + 1)
		}
		p, err := vlq(table, &i)
		if err != nil {
			return 0, err
		}
		code += d
		pos += p
		if code > off {
			break
		}
		if sp := sourcePosition(pos); !sp.external() {
			found, have = sp, true
		}
	}
	if !have {
		return 0, fmt.Errorf("no source position at or before code offset %d", off)
	}
	return found, nil
}

// byteArray reads the bytes of the ByteArray v points to.
func (r *Reader) byteArray(what string, v uint64) ([]byte, error) {
	obj, err := r.h.typed(what, v, r.l.typeByteArray, r.l.typeByteArray)
	if err != nil {
		return nil, err
	}
	n, err := r.h.field(what, obj, r.l.offArrayLength)
	if err != nil {
		return nil, err
	}
	if !r.l.isSmi(n) || r.l.smi(n) < 0 || r.l.smi(n) > maxPositionTable {
		return nil, &ReadError{What: what, Addr: obj, Err: fmt.Errorf("length %#x", n)}
	}
	return r.h.readBytes(what, obj+uint64(r.l.offArrayData), int(r.l.smi(n)))
}
