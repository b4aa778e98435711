package cpython

// Line tables map a byte offset in a code object's instructions to a
// source line, each version as its own PyCode_Addr2Line does. The tables
// come from the target: every decoder stops at the table's end, and the
// tables are bounded when read (maxLineTable), so a decode costs at most
// one pass over a bounded table.

// maxLineTable bounds the line table read of one code object; real ones
// are a few bytes per instruction (a 10,000-line module's is under 64 KiB).
const maxLineTable = 1 << 20

// addr2line returns the line of the instruction at byte offset addr of a
// code object whose line table is t and first line first; false when the
// table says the instruction has no line (or does not reach it). A
// negative addr (a frame that has not started) is the first line, as
// CPython says.
func addr2line(f LineTableFormat, t []byte, first int, addr int) (int, bool) {
	if addr < 0 {
		return first, true
	}
	switch f {
	case LineTableLnotab:
		return lnotabLine(t, first, addr), true
	case LineTable310:
		return linetable310Line(t, first, addr)
	case LineTableLocations:
		return locationsLine(t, first, addr)
	}
	return 0, false
}

// lnotabLine decodes co_lnotab (3.8, 3.9): pairs of an unsigned bytecode
// offset increment and a signed line increment; the line is the one in
// force at the last pair whose offset is not past addr.
func lnotabLine(t []byte, first, addr int) int {
	line, off := first, 0
	for i := 0; i+1 < len(t); i += 2 {
		off += int(t[i])
		if off > addr {
			break
		}
		line += int(int8(t[i+1]))
	}
	return line
}

// linetable310Line decodes 3.10's co_linetable: pairs of a range length in
// bytes and a signed line delta, -128 meaning the range has no line; the
// range holding addr gives the line (empty ranges are skipped, as
// _PyLineTable_NextAddressRange does).
func linetable310Line(t []byte, first, addr int) (int, bool) {
	line, start, end := first, 0, 0
	for i := 0; i+1 < len(t); i += 2 {
		start, end = end, end+int(t[i])
		delta := int8(t[i+1])
		has := delta != -128
		if has {
			line += int(delta)
		}
		if start <= addr && addr < end {
			return line, has
		}
	}
	return 0, false
}

// Codes of the 3.11+ location table's entries (Objects/locations.md).
const (
	locNoColumns  = 13 // line delta (svarint), no columns
	locLong       = 14 // line delta (svarint), end line, columns (varints)
	locNone       = 15 // no location
	locOneLine0   = 10 // one-line forms: line delta code-10, two column bytes
	locOneLine2   = 12
	codeUnitBytes = 2 // sizeof(_Py_CODEUNIT)
)

// locationsLine decodes the location table of 3.11+: entries that each
// cover (first byte & 7) + 1 code units, with a line delta that depends
// on the entry's code; the entry covering addr gives the line.
func locationsLine(t []byte, first, addr int) (int, bool) {
	line, end := first, 0
	for i := 0; i < len(t); {
		b := t[i]
		if b&0x80 == 0 {
			return 0, false // not the start of an entry: a torn or foreign table
		}
		code := int(b>>3) & 15
		start := end
		end += (int(b&7) + 1) * codeUnitBytes
		delta := 0
		switch {
		case code == locNoColumns || code == locLong:
			delta = svarint(t, i+1)
		case code >= locOneLine0 && code <= locOneLine2:
			delta = code - locOneLine0
		}
		line += delta
		if start <= addr && addr < end {
			return line, code != locNone
		}
		// The next entry starts at the next byte with the top bit set.
		for i++; i < len(t) && t[i]&0x80 == 0; i++ {
		}
	}
	return 0, false
}

// svarint reads the signed varint at t[i:]: an unsigned varint in 6-bit
// chunks, least significant first, bit 6 set on all but the last chunk,
// whose lowest bit is the sign. A varint that runs off the table, or
// past what an int holds, reads as what it had so far.
func svarint(t []byte, i int) int {
	var v uint64
	for shift := 0; i < len(t) && shift < 60; shift += 6 {
		b := t[i]
		v |= uint64(b&63) << shift
		i++
		if b&64 == 0 {
			break
		}
	}
	if v&1 != 0 {
		return -int(v >> 1)
	}
	return int(v >> 1)
}
