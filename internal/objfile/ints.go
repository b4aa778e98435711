package objfile

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// MaxInts bounds the data symbols DataInts returns: V8's postmortem table
// has about 550, a file claiming more than this many is not believed.
const MaxInts = 8192

// DataInts returns the values of the file's integer data symbols whose
// names begin with prefix: objects of 1, 2, 4 or 8 bytes, read from the
// section that holds them (signed, in the file's byte order), 0 for one in
// a section with no bytes in the file (.bss). Runtimes publish their
// layouts this way for debuggers: V8's v8dbg_* symbols, for one. The
// dynamic symbol table is read first; the static one only when the
// dynamic one has none (a build that exports nothing). The names are
// copied: nothing returned refers to the file.
func (f *File) DataInts(prefix string) (map[string]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.readable() {
		return nil, ErrClosed
	}
	out := map[string]int64{}
	for _, typ := range []elf.SectionType{elf.SHT_DYNSYM, elf.SHT_SYMTAB} {
		sec := f.symbolSection(typ)
		if sec == nil {
			continue
		}
		if err := f.addDataInts(out, sec, prefix); err != nil {
			return out, err
		}
		if len(out) > 0 {
			break
		}
	}
	return out, nil
}

// addDataInts adds the integer objects named prefix* of one symbol section.
func (f *File) addDataInts(out map[string]int64, sec *elf.Section, prefix string) error {
	if sec.Link == 0 || int(sec.Link) >= len(f.ef.Sections) {
		return fmt.Errorf("%s: section %s: string table index %d out of range", f.Name, sec.Name, sec.Link)
	}
	data, err := f.section(sec.Name)
	if err != nil {
		return err
	}
	strs, err := f.sectionData(f.ef.Sections[sec.Link])
	if err != nil {
		return err
	}
	bo := f.ef.ByteOrder
	for i := 1; i < len(data)/symEntSize(f.ef.Class); i++ {
		e := readSymEntry(data, i, f.ef.Class, bo)
		nameOff, info, shndx, addr, size := e.name, e.info, e.shndx, e.addr, e.size
		if elf.SymType(info&0xf) != elf.STT_OBJECT || (size != 1 && size != 2 && size != 4 && size != 8) {
			continue
		}
		raw, ok := cString(strs, nameOff)
		if !ok || !bytes.HasPrefix(raw, []byte(prefix)) {
			continue
		}
		name := string(raw)
		if int(shndx) >= len(f.ef.Sections) || shndx == uint16(elf.SHN_UNDEF) {
			continue
		}
		v, err := f.intAt(f.ef.Sections[shndx], addr, int(size), bo)
		if err != nil {
			return fmt.Errorf("%s: symbol %s: %w", f.Name, name, err)
		}
		if len(out) >= MaxInts {
			return fmt.Errorf("%s: section %s: more than %d symbols named %s*", f.Name, sec.Name, MaxInts, prefix)
		}
		out[name] = v
	}
	return nil
}

// sectionData is the data of a section found by index (names may repeat).
func (f *File) sectionData(s *elf.Section) ([]byte, error) {
	if s.Type != elf.SHT_STRTAB {
		return nil, fmt.Errorf("%s: section %s is not a string table", f.Name, s.Name)
	}
	if s.Size > uint64(f.size) {
		return nil, fmt.Errorf("%s: section %s at offset %#x claims %d bytes, the file has %d", f.Name, s.Name, s.Offset, s.Size, f.size)
	}
	var data []byte
	err := safely(f.Name, func() error {
		var err error
		data, err = s.Data()
		return err
	})
	return data, err
}

// intAt reads the size-byte signed integer at link-time address addr of sec.
func (f *File) intAt(sec *elf.Section, addr uint64, size int, bo binary.ByteOrder) (int64, error) {
	if addr < sec.Addr || addr-sec.Addr > sec.Size || sec.Size-(addr-sec.Addr) < uint64(size) {
		return 0, fmt.Errorf("address %#x outside its section %s", addr, sec.Name)
	}
	if sec.Type == elf.SHT_NOBITS {
		return 0, nil
	}
	off := sec.Offset + (addr - sec.Addr)
	if off > uint64(f.size) || uint64(f.size)-off < uint64(size) {
		return 0, fmt.Errorf("offset %#x past the end of the file", off)
	}
	var b [8]byte
	if _, err := f.r.ReadAt(b[:size], int64(off)); err != nil {
		return 0, fmt.Errorf("offset %#x: %w", off, err)
	}
	switch size {
	case 1:
		return int64(int8(b[0])), nil
	case 2:
		return int64(int16(bo.Uint16(b[:]))), nil
	case 4:
		return int64(int32(bo.Uint32(b[:]))), nil
	}
	return int64(bo.Uint64(b[:])), nil
}

// cString is the NUL-terminated string at off in a string table.
func cString(strs []byte, off uint32) ([]byte, bool) {
	if int(off) >= len(strs) {
		return nil, false
	}
	s := strs[off:]
	if i := bytes.IndexByte(s, 0); i > 0 {
		return s[:i], true
	}
	return nil, false
}

// MaxDataBytes bounds what DataBytes reads of one symbol.
const MaxDataBytes = 64 << 10

// DataBytes returns the contents of the data object named name (from the
// dynamic symbol table, else the static one), as a runtime's tables are:
// V8's table of bytecode sizes, for one. Nil without error when the file
// has no such symbol.
func (f *File) DataBytes(name string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.readable() {
		return nil, ErrClosed
	}
	for _, typ := range []elf.SectionType{elf.SHT_DYNSYM, elf.SHT_SYMTAB} {
		sec := f.symbolSection(typ)
		if sec == nil {
			continue
		}
		b, found, err := f.dataBytes(sec, name)
		if found || err != nil {
			return b, err
		}
	}
	return nil, nil
}

// dataBytes looks for the object name in one symbol section.
func (f *File) dataBytes(sec *elf.Section, name string) ([]byte, bool, error) {
	if sec.Link == 0 || int(sec.Link) >= len(f.ef.Sections) {
		return nil, false, fmt.Errorf("%s: section %s: string table index %d out of range", f.Name, sec.Name, sec.Link)
	}
	data, err := f.section(sec.Name)
	if err != nil {
		return nil, false, err
	}
	strs, err := f.sectionData(f.ef.Sections[sec.Link])
	if err != nil {
		return nil, false, err
	}
	want := []byte(name)
	for i := 1; i < len(data)/symEntSize(f.ef.Class); i++ {
		e := readSymEntry(data, i, f.ef.Class, f.ef.ByteOrder)
		if elf.SymType(e.info&0xf) != elf.STT_OBJECT {
			continue
		}
		if raw, ok := cString(strs, e.name); !ok || !bytes.Equal(raw, want) {
			continue
		}
		if e.size > MaxDataBytes || int(e.shndx) >= len(f.ef.Sections) || e.shndx == uint16(elf.SHN_UNDEF) {
			return nil, true, fmt.Errorf("%s: symbol %s: %d bytes in section %d", f.Name, name, e.size, e.shndx)
		}
		s := f.ef.Sections[e.shndx]
		if e.addr < s.Addr || e.addr-s.Addr > s.Size || s.Size-(e.addr-s.Addr) < e.size {
			return nil, true, fmt.Errorf("%s: symbol %s: address %#x outside its section %s", f.Name, name, e.addr, s.Name)
		}
		if s.Type == elf.SHT_NOBITS {
			return make([]byte, e.size), true, nil
		}
		off := s.Offset + (e.addr - s.Addr)
		if off > uint64(f.size) || uint64(f.size)-off < e.size {
			return nil, true, fmt.Errorf("%s: symbol %s: offset %#x past the end of the file", f.Name, name, off)
		}
		b := make([]byte, e.size)
		if _, err := f.r.ReadAt(b, int64(off)); err != nil {
			return nil, true, fmt.Errorf("%s: symbol %s at offset %#x: %w", f.Name, name, off, err)
		}
		return b, true, nil
	}
	return nil, false, nil
}

// symEntry is one ELF symbol table entry.
type symEntry struct {
	name       uint32
	info       uint8
	shndx      uint16
	addr, size uint64
}

func symEntSize(class elf.Class) int {
	if class == elf.ELFCLASS32 {
		return 16
	}
	return 24
}

// readSymEntry decodes entry i of a symbol section.
func readSymEntry(data []byte, i int, class elf.Class, bo binary.ByteOrder) symEntry {
	n := symEntSize(class)
	e := data[i*n : (i+1)*n]
	if class == elf.ELFCLASS32 {
		return symEntry{name: bo.Uint32(e[0:]), addr: uint64(bo.Uint32(e[4:])), size: uint64(bo.Uint32(e[8:])), info: e[12], shndx: bo.Uint16(e[14:])}
	}
	return symEntry{name: bo.Uint32(e[0:]), info: e[4], shndx: bo.Uint16(e[6:]), addr: bo.Uint64(e[8:]), size: bo.Uint64(e[16:])}
}
