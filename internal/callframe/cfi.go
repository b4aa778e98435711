package callframe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Pointer encodings (DW_EH_PE_*, LSB 4.1 "DWARF Extensions").
const (
	peAbsptr  = 0x00
	peULEB128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSLEB128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c

	pePcrel    = 0x10
	peTextrel  = 0x20
	peDatarel  = 0x30
	peFuncrel  = 0x40
	peAligned  = 0x50
	peIndirect = 0x80
	peOmit     = 0xff
)

// maxSection bounds the size of a call frame section we accept (libxul's
// .eh_frame is a few MiB; nothing legitimate comes near this).
const maxSection = 256 << 20

// Table is one module's call frame information (.eh_frame, or .debug_frame
// where a file has no .eh_frame), in the module's link-time addresses,
// with a table of the code ranges its FDEs cover. It is safe for
// concurrent use.
type Table struct {
	name  string // the file and the section, for errors
	data  []byte
	addr  uint64 // link-time address of data[0]
	debug bool   // .debug_frame: CIE ids and pointers differ (DWARF 5 6.4.1)
	fdes  []fdeEntry
	// Bad counts FDEs that failed to parse (skipped).
	Bad int

	mu   sync.Mutex
	cies map[uint32]*cie
	rows map[uint64]*Row
}

// fdeEntry is an FDE's code range and where its record begins in data.
type fdeEntry struct {
	begin, end uint64
	off        uint32
}

// cie is a parsed Common Information Entry.
type cie struct {
	codeAlign uint64
	dataAlign int64
	raReg     uint64
	fdeEnc    byte
	lsdaEnc   byte
	hasAug    bool // 'z': FDEs carry an augmentation data length
	signal    bool // 'S': frames of this CIE are signal trampolines
	initial   []byte
}

// fde is a parsed Frame Description Entry.
type fde struct {
	cie        *cie
	begin, end uint64
	program    []byte
	off        uint32 // offset in .eh_frame, for errors
}

// parseError names the section, the offset in it and the reason.
type parseError struct {
	name   string
	off    int
	reason string
}

func (e *parseError) Error() string {
	return fmt.Sprintf("%s offset %#x: %s", e.name, e.off, e.reason)
}

// ebuf reads little-endian values from a section with bounds checks. The
// first failure sticks, so callers check err once after a group of reads.
type ebuf struct {
	b    []byte
	off  int
	err  error
	name string
}

func (r *ebuf) fail(format string, args ...any) {
	if r.err == nil {
		r.err = &parseError{r.name, r.off, fmt.Sprintf(format, args...)}
	}
}

func (r *ebuf) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail("truncated: need %d bytes, %d left", n, len(r.b)-r.off)
		return false
	}
	return true
}

func (r *ebuf) u8() byte {
	if !r.need(1) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *ebuf) u16() uint16 {
	if !r.need(2) {
		return 0
	}
	v := binary.LittleEndian.Uint16(r.b[r.off:])
	r.off += 2
	return v
}

func (r *ebuf) u32() uint32 {
	if !r.need(4) {
		return 0
	}
	v := binary.LittleEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *ebuf) u64() uint64 {
	if !r.need(8) {
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *ebuf) bytes(n uint64) []byte {
	if n > uint64(len(r.b)) || !r.need(int(n)) {
		r.fail("truncated: need %d bytes, %d left", n, len(r.b)-r.off)
		return nil
	}
	v := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return v
}

func (r *ebuf) uleb() uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		if !r.need(1) {
			return 0
		}
		c := r.b[r.off]
		r.off++
		if shift < 64 {
			v |= uint64(c&0x7f) << shift
		} else if c&0x7f != 0 {
			r.fail("LEB128 value overflows 64 bits")
			return 0
		}
		if c&0x80 == 0 {
			return v
		}
		if shift > 70 {
			r.fail("LEB128 value too long")
			return 0
		}
	}
}

func (r *ebuf) sleb() int64 {
	var v int64
	shift := uint(0)
	for {
		if !r.need(1) {
			return 0
		}
		c := r.b[r.off]
		r.off++
		if shift < 64 {
			v |= int64(c&0x7f) << shift
		}
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
		if shift > 70 {
			r.fail("LEB128 value too long")
			return 0
		}
	}
}

func (r *ebuf) cstring() string {
	if r.err != nil {
		return ""
	}
	for i := r.off; i < len(r.b); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s
		}
	}
	r.fail("unterminated string")
	return ""
}

// pointer decodes a value in encoding enc. base is the link-time address
// of r.b[0] (for pc-relative values); datarel is the base of data-relative
// ones (.eh_frame_hdr's start; 0 where the ABI defines none).
func (r *ebuf) pointer(enc byte, base, datarel uint64) uint64 {
	if enc == peOmit {
		return 0
	}
	at := base + uint64(r.off)
	var v uint64
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		v = r.u64()
	case peULEB128:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peSLEB128:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	default:
		r.fail("unknown pointer format %#x", enc)
		return 0
	}
	switch enc & 0x70 {
	case peAbsptr:
	case pePcrel:
		v += at
	case peDatarel:
		if datarel == 0 {
			r.fail("data-relative pointer where no data base is defined (encoding %#x)", enc)
			return 0
		}
		v += datarel
	default:
		// textrel, funcrel and aligned are not produced for x86-64.
		r.fail("unsupported pointer application %#x", enc&0x70)
		return 0
	}
	if enc&peIndirect != 0 {
		r.fail("indirect pointer where a direct one is needed (encoding %#x)", enc)
		return 0
	}
	return v
}

// skipPointer steps over a value in encoding enc without applying it
// (personality routines: indirect pointers we never follow).
func (r *ebuf) skipPointer(enc byte) {
	if enc == peOmit {
		return
	}
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		r.bytes(8)
	case peULEB128:
		r.uleb()
	case peSLEB128:
		r.sleb()
	case peUdata2, peSdata2:
		r.bytes(2)
	case peUdata4, peSdata4:
		r.bytes(4)
	default:
		r.fail("unknown pointer format %#x", enc)
	}
}

// entry is one length-delimited record of .eh_frame.
type entry struct {
	off     int    // offset of the length field
	idOff   int    // offset of the CIE id / CIE pointer field
	id      uint32 // 0 for a CIE in .eh_frame, 0xffffffff in .debug_frame
	body    []byte // after the id field, to the record's end
	bodyOff int
	next    int
}

// errTerminator marks the zero-length record that ends .eh_frame.
var errTerminator = errors.New("terminator")

func readEntry(name string, data []byte, off int) (entry, error) {
	r := &ebuf{b: data, off: off, name: name}
	e := entry{off: off}
	length := uint64(r.u32())
	if r.err != nil {
		return e, r.err
	}
	if length == 0 {
		return e, errTerminator
	}
	if length == 0xffffffff {
		length = r.u64()
	}
	if length < 4 || length > uint64(len(data)-r.off) {
		r.fail("record length %d past the section's end (%d bytes left)", length, len(data)-r.off)
		return e, r.err
	}
	end := r.off + int(length)
	e.idOff = r.off
	e.id = r.u32()
	e.bodyOff = r.off
	e.body = data[r.off:end]
	e.next = end
	return e, r.err
}

// parseCIE parses the CIE whose record starts at off.
func parseCIE(f *Table, off int) (*cie, error) {
	name, data := f.name, f.data
	e, err := readEntry(name, data, off)
	if err == errTerminator {
		return nil, &parseError{name, off, "CIE pointer leads to the terminator"}
	}
	if err != nil {
		return nil, err
	}
	if !f.isCIE(e.id) {
		return nil, &parseError{name, off, "CIE pointer leads to an FDE"}
	}
	r := &ebuf{b: data[:e.next], off: e.bodyOff, name: name}
	c := &cie{fdeEnc: peAbsptr, lsdaEnc: peOmit}
	version := r.u8()
	if r.err == nil && version != 1 && version != 3 && version != 4 {
		return nil, &parseError{name, off, fmt.Sprintf("CIE version %d", version)}
	}
	aug := r.cstring()
	if version == 4 {
		if as := r.u8(); r.err == nil && as != 8 {
			return nil, &parseError{name, off, fmt.Sprintf("CIE address size %d", as)}
		}
		r.u8() // segment selector size
	}
	if len(aug) >= 2 && aug[:2] == "eh" {
		r.bytes(8) // GCC 2.x eh_ptr
		aug = aug[2:]
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		c.raReg = uint64(r.u8())
	} else {
		c.raReg = r.uleb()
	}
	if r.err != nil {
		return nil, r.err
	}
	if aug != "" && aug[0] == 'z' {
		c.hasAug = true
		n := r.uleb()
		augData := r.bytes(n)
		if r.err != nil {
			return nil, r.err
		}
		ar := &ebuf{b: data[:r.off], off: r.off - len(augData), name: name}
		for _, ch := range aug[1:] {
			switch ch {
			case 'L':
				c.lsdaEnc = ar.u8()
			case 'P':
				ar.skipPointer(ar.u8())
			case 'R':
				c.fdeEnc = ar.u8()
			case 'S':
				c.signal = true
			case 'B', 'G':
				// AArch64 BTI / MTE markers: no data, nothing to do.
			default:
				// An unknown letter after 'z' is safe to skip: the
				// length told us where the data ends.
			}
			if ar.err != nil {
				return nil, ar.err
			}
		}
	} else if aug != "" {
		return nil, &parseError{name, off, fmt.Sprintf("augmentation %q without 'z' cannot be skipped", aug)}
	}
	c.initial = data[r.off:e.next]
	return c, nil
}

// isCIE says whether a record with this id is a CIE.
func (f *Table) isCIE(id uint32) bool {
	if f.debug {
		return id == 0xffffffff
	}
	return id == 0
}

// cieAt returns the CIE at off, parsing it once.
func (f *Table) cieAt(off int) (*cie, error) {
	f.mu.Lock()
	c := f.cies[uint32(off)]
	f.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := parseCIE(f, off)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.cies == nil {
		f.cies = make(map[uint32]*cie)
	}
	f.cies[uint32(off)] = c
	f.mu.Unlock()
	return c, nil
}

// parseFDE parses the FDE whose record is e. Its CIE pointer is relative
// to the field in .eh_frame, an offset in the section in .debug_frame.
func (f *Table) parseFDE(e entry) (*fde, error) {
	cieOff := e.idOff - int(e.id)
	if f.debug {
		cieOff = int(e.id)
		if uint64(e.id) >= uint64(len(f.data)) {
			return nil, &parseError{f.name, e.off, fmt.Sprintf("CIE pointer %#x points past the section", e.id)}
		}
	} else if int(e.id) > e.idOff || cieOff < 0 {
		return nil, &parseError{f.name, e.off, fmt.Sprintf("CIE pointer %#x points before the section", e.id)}
	}
	c, err := f.cieAt(cieOff)
	if err != nil {
		return nil, err
	}
	r := &ebuf{b: f.data[:e.next], off: e.bodyOff, name: f.name}
	d := &fde{cie: c, off: uint32(e.off)}
	d.begin = r.pointer(c.fdeEnc, f.addr, 0)
	// The range has the begin's format but is never relative.
	size := r.pointer(c.fdeEnc&0x0f, f.addr, 0)
	if c.hasAug {
		n := r.uleb()
		r.bytes(n) // the LSDA pointer: exception handling only
	}
	if r.err != nil {
		return nil, r.err
	}
	d.end = d.begin + size
	if d.end < d.begin {
		return nil, &parseError{f.name, e.off, fmt.Sprintf("FDE range %#x+%#x wraps", d.begin, size)}
	}
	d.program = f.data[r.off:e.next]
	return d, nil
}

// ParseEhFrame reads every record of data (the .eh_frame of name, loaded
// at link-time address addr) and builds the FDE table. Records that fail
// to parse are skipped and counted (Table.Bad): one bad FDE must not cost a
// module all of its others. An error is returned only when nothing usable
// was found in a non-empty section.
func ParseEhFrame(name string, data []byte, addr uint64) (*Table, error) {
	return parseCFI(&Table{name: name + ": .eh_frame", data: data, addr: addr})
}

// ParseDebugFrame is ParseEhFrame for a .debug_frame section (addresses
// are absolute there: addr is not needed).
func ParseDebugFrame(name string, data []byte) (*Table, error) {
	return parseCFI(&Table{name: name + ": .debug_frame", data: data, debug: true})
}

func parseCFI(f *Table) (*Table, error) {
	name, data := f.name, f.data
	if len(data) > maxSection {
		return nil, fmt.Errorf("%s of %d bytes is larger than %d", name, len(data), maxSection)
	}
	bad := 0
	var firstErr error
	for off := 0; off < len(data); {
		e, err := readEntry(name, data, off)
		if err == errTerminator {
			if f.debug {
				off += 4 // padding in .debug_frame, not an end
				continue
			}
			break
		}
		if err != nil {
			// The length is wrong: nothing after it can be found.
			bad++
			if firstErr == nil {
				firstErr = err
			}
			break
		}
		off = e.next
		if f.isCIE(e.id) {
			continue // a CIE; parsed when an FDE refers to it
		}
		d, err := f.parseFDE(e)
		if err != nil {
			bad++
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if d.end > d.begin {
			f.fdes = append(f.fdes, fdeEntry{begin: d.begin, end: d.end, off: uint32(e.off)})
		}
	}
	sort.Slice(f.fdes, func(i, j int) bool { return f.fdes[i].begin < f.fdes[j].begin })
	f.Bad = bad
	if len(f.fdes) == 0 && firstErr != nil {
		return nil, firstErr
	}
	return f, nil
}

// Len is the number of FDEs: functions whose frames it describes.
func (f *Table) Len() int { return len(f.fdes) }

// SizeBytes is what the table holds in memory, for a cache's bound.
func (f *Table) SizeBytes() int64 { return int64(len(f.data)) + int64(len(f.fdes))*16 }

// find returns the FDE covering the link-time address pc.
func (f *Table) find(pc uint64) (*fde, error) {
	i := sort.Search(len(f.fdes), func(i int) bool { return f.fdes[i].begin > pc }) - 1
	// Ranges may nest (a hand-written FDE inside a larger one): look back
	// a few entries for one that covers pc.
	for j := i; j >= 0 && j > i-4; j-- {
		if pc < f.fdes[j].end {
			e, err := readEntry(f.name, f.data, int(f.fdes[j].off))
			if err != nil {
				return nil, err
			}
			return f.parseFDE(e)
		}
	}
	return nil, nil
}

// FuncRange returns the link-time code range of the FDE covering pc: for
// compiled code, the function (or the part of it, such as a cold part)
// holding pc.
func (f *Table) FuncRange(pc uint64) (lo, hi uint64, ok bool) {
	i := sort.Search(len(f.fdes), func(i int) bool { return f.fdes[i].begin > pc }) - 1
	for j := i; j >= 0 && j > i-4; j-- {
		if pc < f.fdes[j].end {
			return f.fdes[j].begin, f.fdes[j].end, true
		}
	}
	return 0, 0, false
}
