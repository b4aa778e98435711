package jit

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// Magic is the jitdump magic, "JiTD" read as a big-endian u32. A file
// whose first four bytes read 0x4A695444 in little-endian order was
// written on a little-endian machine.
const Magic = 0x4A695444

// FlagArchTimestamp is set in Header.Flags when record timestamps are the
// CPU's time stamp counter rather than CLOCK_MONOTONIC.
const FlagArchTimestamp = 1

const (
	headerSize = 40 // the header's size in version 1; total_size may be larger
	prefixSize = 16 // id, total_size, timestamp
	loadFixed  = prefixSize + 40
	moveFixed  = prefixSize + 48
	debugFixed = prefixSize + 16
	unwFixed   = prefixSize + 24
	// debugEntryMin is a debug entry's smallest size: addr, line,
	// discrim and an empty file name's NUL.
	debugEntryMin = 17
	// debugAddrBias is what LLVM and V8 add to CODE_DEBUG_INFO addresses:
	// the size of the ELF header perf inject puts before the code.
	debugAddrBias = 0x40
)

// Header is a jitdump file header.
type Header struct {
	BigEndian bool   // the writer's byte order
	Version   uint32 // 1
	Size      uint32 // total_size: the header's length in bytes (>= 40)
	ElfMach   uint32 // ELF machine: 62 x86-64, 183 aarch64
	Pad1      uint32
	Pid       uint32 // the writer's pid in its own pid namespace
	Timestamp uint64 // when the file was created (writers disagree on the clock)
	Flags     uint64
}

// ArchTimestamp reports whether record times are the CPU's time stamp
// counter (they then need Options.ConvertTSC to be compared with samples).
func (h Header) ArchTimestamp() bool { return h.Flags&FlagArchTimestamp != 0 }

// RecordType is a jitdump record id.
type RecordType uint32

const (
	CodeLoad          RecordType = 0
	CodeMove          RecordType = 1
	CodeDebugInfo     RecordType = 2
	CodeClose         RecordType = 3
	CodeUnwindingInfo RecordType = 4
	numRecordTypes               = 5
)

func (t RecordType) String() string {
	switch t {
	case CodeLoad:
		return "CODE_LOAD"
	case CodeMove:
		return "CODE_MOVE"
	case CodeDebugInfo:
		return "CODE_DEBUG_INFO"
	case CodeClose:
		return "CODE_CLOSE"
	case CodeUnwindingInfo:
		return "CODE_UNWINDING_INFO"
	}
	return fmt.Sprintf("record type %d", uint32(t))
}

// endian reads integers in the writer's byte order. A bool beats an
// interface here: the parser reads several fields per record.
type endian bool

func (big endian) u32(b []byte) uint32 {
	if big {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
}

func (big endian) u64(b []byte) uint64 {
	if big {
		return binary.BigEndian.Uint64(b)
	}
	return binary.LittleEndian.Uint64(b)
}

// parseHeader decodes the header at the start of b (at least 40 bytes).
func parseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < headerSize {
		return h, fmt.Errorf("file is %d bytes, shorter than the %d-byte header", len(b), headerSize)
	}
	switch {
	case binary.LittleEndian.Uint32(b) == Magic:
	case binary.BigEndian.Uint32(b) == Magic:
		h.BigEndian = true
	default:
		return h, fmt.Errorf("bad magic % x, want %q in either byte order", b[:4], "JiTD")
	}
	e := endian(h.BigEndian)
	h.Version = e.u32(b[4:])
	h.Size = e.u32(b[8:])
	h.ElfMach = e.u32(b[12:])
	h.Pad1 = e.u32(b[16:])
	h.Pid = e.u32(b[20:])
	h.Timestamp = e.u64(b[24:])
	h.Flags = e.u64(b[32:])
	if h.Version != 1 {
		return h, fmt.Errorf("version %d, only version 1 is known", h.Version)
	}
	if h.Size < headerSize {
		return h, fmt.Errorf("header total_size %d smaller than %d", h.Size, headerSize)
	}
	return h, nil
}

// record is one decoded record. Byte slices point into the reader's
// buffer and are valid only until the next record.
type record struct {
	typ  RecordType
	off  int64  // file offset of the record
	size uint32 // total_size
	time uint64

	// CODE_LOAD and CODE_MOVE
	pid, tid            uint32
	vma, addr, codeSize uint64
	codeIndex           uint64
	newAddr             uint64 // CODE_MOVE
	name                []byte // CODE_LOAD, without the NUL

	// CODE_DEBUG_INFO: the code it describes, how many entries, and the
	// entry with the lowest address (the function's first line).
	dbgNr     uint64
	dbgFile   []byte
	dbgLine   int32
	dbgParsed uint64 // entries decoded (fewer than dbgNr when only the head was read)
	// dbgEntries collects every entry when it is not nil (line tables).
	dbgEntries []debugEntry

	// CODE_UNWINDING_INFO; unwindData is the record's .eh_frame then
	// .eh_frame_hdr, when the whole record was read (nil otherwise).
	unwindSize, ehFrameHdrSize, mappedSize uint64
	unwindData                             []byte
}

// decodeRecord decodes the record in b, which holds the record's first
// len(b) bytes; full is true when b holds all r.size bytes. A record whose
// content contradicts its size is an error; the caller skips it by size.
func decodeRecord(e endian, b []byte, full bool, r *record) error {
	switch r.typ {
	case CodeLoad:
		return decodeLoad(e, b, r)
	case CodeMove:
		return decodeMove(e, b, r)
	case CodeDebugInfo:
		return decodeDebug(e, b, full, r)
	case CodeUnwindingInfo:
		return decodeUnwinding(e, b, full, r)
	}
	return nil // CODE_CLOSE has no body; unknown ids are skipped by size
}

func decodeLoad(e endian, b []byte, r *record) error {
	if r.size < loadFixed+1 {
		return fmt.Errorf("CODE_LOAD of %d bytes, smaller than its %d fixed bytes and a name", r.size, loadFixed+1)
	}
	if len(b) < loadFixed {
		return fmt.Errorf("CODE_LOAD head of %d bytes read, need %d", len(b), loadFixed)
	}
	r.pid = e.u32(b[16:])
	r.tid = e.u32(b[20:])
	r.vma = e.u64(b[24:])
	r.addr = e.u64(b[32:])
	r.codeSize = e.u64(b[40:])
	r.codeIndex = e.u64(b[48:])
	nameEnd := indexNUL(b[loadFixed:])
	if nameEnd < 0 {
		if len(b) < int(r.size) {
			return fmt.Errorf("CODE_LOAD name longer than %d bytes", len(b)-loadFixed)
		}
		return fmt.Errorf("CODE_LOAD name not NUL-terminated within the record's %d bytes", r.size)
	}
	r.name = b[loadFixed : loadFixed+nameEnd]
	room := uint64(r.size) - uint64(loadFixed+nameEnd+1)
	if r.codeSize > room {
		return fmt.Errorf("CODE_LOAD %q: code_size %d larger than the %d bytes left in the record", r.name, r.codeSize, room)
	}
	if r.addr+r.codeSize < r.addr {
		return fmt.Errorf("CODE_LOAD %q: code_addr %#x + code_size %#x wraps around", r.name, r.addr, r.codeSize)
	}
	return nil
}

func decodeMove(e endian, b []byte, r *record) error {
	if r.size < moveFixed || len(b) < moveFixed {
		return fmt.Errorf("CODE_MOVE of %d bytes, smaller than its %d fixed bytes", r.size, moveFixed)
	}
	r.pid = e.u32(b[16:])
	r.tid = e.u32(b[20:])
	r.vma = e.u64(b[24:])
	r.addr = e.u64(b[32:]) // old_code_addr
	r.newAddr = e.u64(b[40:])
	r.codeSize = e.u64(b[48:])
	r.codeIndex = e.u64(b[56:])
	if r.newAddr+r.codeSize < r.newAddr {
		return fmt.Errorf("CODE_MOVE: new_code_addr %#x + code_size %#x wraps around", r.newAddr, r.codeSize)
	}
	return nil
}

// decodeDebug reads the entries it holds and keeps the one with the lowest
// address. When only the record's head was read (a huge record), the
// entries in the head are used.
func decodeDebug(e endian, b []byte, full bool, r *record) error {
	if r.size < debugFixed || len(b) < debugFixed {
		return fmt.Errorf("CODE_DEBUG_INFO of %d bytes, smaller than its %d fixed bytes", r.size, debugFixed)
	}
	r.addr = e.u64(b[16:])
	r.dbgNr = e.u64(b[24:])
	if max := uint64(r.size-debugFixed) / debugEntryMin; r.dbgNr > max {
		return fmt.Errorf("CODE_DEBUG_INFO: nr_entry %d cannot fit in a %d-byte record (at most %d)", r.dbgNr, r.size, max)
	}
	r.dbgFile, r.dbgLine, r.dbgParsed = nil, 0, 0
	p := b[debugFixed:]
	var file []byte
	lowest := ^uint64(0)
	for i := uint64(0); i < r.dbgNr; i++ {
		if len(p) < debugEntryMin {
			if full {
				return fmt.Errorf("CODE_DEBUG_INFO: entry %d of %d runs past the record's end", i, r.dbgNr)
			}
			break
		}
		addr := e.u64(p)
		line := int32(e.u32(p[8:]))
		n := indexNUL(p[16:])
		if n < 0 {
			if full {
				return fmt.Errorf("CODE_DEBUG_INFO: entry %d of %d: file name not NUL-terminated within the record", i, r.dbgNr)
			}
			break
		}
		// "\xff" repeats the file of the entry before.
		if n == 1 && p[16] == 0xff {
			if file == nil {
				return fmt.Errorf("CODE_DEBUG_INFO for %#x: entry %d repeats the file name of an entry before it, and there is none", r.addr, i)
			}
		} else {
			file = p[16 : 16+n]
			if n == 0 {
				// V8's stale bytes again, beginning with a NUL: a line
				// without a file is no location.
				return fmt.Errorf("CODE_DEBUG_INFO for %#x: entry %d's file name is empty", r.addr, i)
			}
			if !isText(file) {
				// V8 in Node.js 20 writes the right length but stale
				// bytes for user scripts' names: nothing after this
				// entry can be trusted.
				return fmt.Errorf("CODE_DEBUG_INFO for %#x: entry %d's file name is not text (% x)", r.addr, i, clip(file))
			}
		}
		if addr < lowest {
			lowest, r.dbgFile, r.dbgLine = addr, file, line
		}
		if r.dbgEntries != nil {
			r.dbgEntries = append(r.dbgEntries, debugEntry{addr: addr, line: line, file: file})
		}
		p = p[16+n+1:]
		r.dbgParsed++
	}
	return nil
}

// debugEntry is one CODE_DEBUG_INFO entry; file points into the record.
type debugEntry struct {
	addr uint64
	line int32
	file []byte
}

func decodeUnwinding(e endian, b []byte, full bool, r *record) error {
	if r.size < unwFixed || len(b) < unwFixed {
		return fmt.Errorf("CODE_UNWINDING_INFO of %d bytes, smaller than its %d fixed bytes", r.size, unwFixed)
	}
	r.unwindSize = e.u64(b[16:])
	r.ehFrameHdrSize = e.u64(b[24:])
	r.mappedSize = e.u64(b[32:])
	if room := uint64(r.size - unwFixed); r.unwindSize > room {
		return fmt.Errorf("CODE_UNWINDING_INFO: unwinding_size %d larger than the %d bytes left in the record", r.unwindSize, room)
	}
	if r.ehFrameHdrSize > r.unwindSize {
		return fmt.Errorf("CODE_UNWINDING_INFO: eh_frame_hdr_size %d larger than unwinding_size %d", r.ehFrameHdrSize, r.unwindSize)
	}
	r.unwindData = nil
	if full {
		r.unwindData = b[unwFixed : unwFixed+int(r.unwindSize)]
	}
	return nil
}

// isText reports whether b is UTF-8 without control characters: a file
// name, not stale memory.
func isText(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return utf8.Valid(b)
}

func indexNUL(b []byte) int { return bytes.IndexByte(b, 0) }
