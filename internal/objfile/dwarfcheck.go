package objfile

import (
	"encoding/binary"
	"fmt"
)

// checkLineHeader checks a DWARF 5 line table header before debug/dwarf
// reads it: debug/dwarf allocates its directory and file tables from the
// counts written there, before reading a single entry, so a lying count
// would allocate without bound. Each count must fit in what remains of
// the table. Older versions end their lists with a terminator instead and
// need no check.
func checkLineHeader(line []byte, off int64, bo binary.ByteOrder) error {
	if off < 0 || off >= int64(len(line)) {
		return fmt.Errorf("line table offset %#x out of range", off)
	}
	r := &dwarfReader{b: line, p: int(off), bo: bo}
	length, dwarf64 := uint64(r.u32()), false
	if length == 0xffffffff {
		length, dwarf64 = r.u64(), true
	}
	if r.err != nil || length > uint64(len(line)-r.p) {
		return fmt.Errorf("line table at %#x: length %d past the section's end", off, length)
	}
	r.b = line[:r.p+int(length)]
	version := r.u16()
	if version < 5 {
		return r.err
	}
	r.skip(2) // address_size, segment_selector_size
	if dwarf64 {
		r.skip(8)
	} else {
		r.skip(4)
	}
	r.skip(5) // min_inst_length, max_ops_per_inst, default_is_stmt, line_base, line_range
	opcodeBase := r.u8()
	if opcodeBase > 0 {
		r.skip(int(opcodeBase) - 1)
	}
	for _, what := range []string{"directories", "file names"} {
		nformats := int(r.u8())
		forms := make([]uint64, 0, nformats)
		for i := 0; i < nformats; i++ {
			r.uleb() // content type
			forms = append(forms, r.uleb())
		}
		count := r.uleb()
		if r.err != nil {
			return fmt.Errorf("line table at %#x: %v", off, r.err)
		}
		if count > uint64(len(r.b)-r.p) {
			return fmt.Errorf("line table at %#x: %d %s in %d bytes", off, count, what, len(r.b)-r.p)
		}
		if len(forms) == 0 && count > 0 {
			return fmt.Errorf("line table at %#x: %d %s without a format", off, count, what)
		}
		for i := uint64(0); i < count && r.err == nil; i++ {
			for _, f := range forms {
				r.skipForm(f, dwarf64)
			}
		}
	}
	if r.err != nil {
		return fmt.Errorf("line table at %#x: %v", off, r.err)
	}
	return nil
}

// dwarfReader reads DWARF's encodings from a byte slice, remembering the
// first error instead of panicking.
type dwarfReader struct {
	b   []byte
	p   int
	bo  binary.ByteOrder
	err error
}

func (r *dwarfReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.p {
		r.err = fmt.Errorf("truncated at offset %#x", r.p)
		return nil
	}
	b := r.b[r.p : r.p+n]
	r.p += n
	return b
}

func (r *dwarfReader) skip(n int) { r.take(n) }

func (r *dwarfReader) u8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *dwarfReader) u16() uint16 {
	if b := r.take(2); b != nil {
		return r.bo.Uint16(b)
	}
	return 0
}

func (r *dwarfReader) u32() uint32 {
	if b := r.take(4); b != nil {
		return r.bo.Uint32(b)
	}
	return 0
}

func (r *dwarfReader) u64() uint64 {
	if b := r.take(8); b != nil {
		return r.bo.Uint64(b)
	}
	return 0
}

func (r *dwarfReader) uleb() uint64 {
	var v uint64
	for shift := uint(0); r.err == nil; shift += 7 {
		c := r.u8()
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		}
		if c&0x80 == 0 {
			return v
		}
	}
	return 0
}

func (r *dwarfReader) cstring() {
	for r.err == nil && r.u8() != 0 {
	}
}

// skipForm skips one attribute value of the forms a line table header may
// use (DWARF 5, 6.2.4.1).
func (r *dwarfReader) skipForm(form uint64, dwarf64 bool) {
	offsetSize := 4
	if dwarf64 {
		offsetSize = 8
	}
	switch form {
	case 0x08: // string
		r.cstring()
	case 0x0e, 0x1f, 0x1d: // strp, line_strp, strp_sup
		r.skip(offsetSize)
	case 0x1a, 0x0f: // strx, udata
		r.uleb()
	case 0x25, 0x0b: // strx1, data1
		r.skip(1)
	case 0x26, 0x05: // strx2, data2
		r.skip(2)
	case 0x27: // strx3
		r.skip(3)
	case 0x28, 0x06: // strx4, data4
		r.skip(4)
	case 0x07: // data8
		r.skip(8)
	case 0x1e: // data16
		r.skip(16)
	case 0x09: // block
		n := r.uleb()
		if n > uint64(len(r.b)) {
			r.err = fmt.Errorf("block of %d bytes at offset %#x", n, r.p)
			return
		}
		r.skip(int(n))
	default:
		if r.err == nil {
			r.err = fmt.Errorf("form %#x not allowed in a line table header", form)
		}
	}
}
