package objfile

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
)

// checkHeaderTables refuses an ELF header whose program or section
// header table lies beyond the file's size. debug/elf reads the tables
// the header describes through a reader of unknown size, and allocates up
// to 10 MiB for each before it finds the file ended; a 64-byte file could
// cost that.
func checkHeaderTables(r io.ReaderAt, size int64) error {
	var h [64]byte
	n, _ := r.ReadAt(h[:], 0)
	if n < 52 || string(h[:4]) != elf.ELFMAG {
		return nil // too short or not ELF: debug/elf says which
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if elf.Data(h[elf.EI_DATA]) == elf.ELFDATA2MSB {
		bo = binary.BigEndian
	}
	var phoff, shoff uint64
	var phent, phnum, shent, shnum uint64
	var shstrndx uint64
	var shOffAt, shSizeAt, shLinkAt, shInfoAt, word uint64 // fields of a section header
	switch elf.Class(h[elf.EI_CLASS]) {
	case elf.ELFCLASS64:
		if n < 64 {
			return nil
		}
		phoff, shoff = bo.Uint64(h[0x20:]), bo.Uint64(h[0x28:])
		phent, phnum = uint64(bo.Uint16(h[0x36:])), uint64(bo.Uint16(h[0x38:]))
		shent, shnum = uint64(bo.Uint16(h[0x3a:])), uint64(bo.Uint16(h[0x3c:]))
		shstrndx = uint64(bo.Uint16(h[0x3e:]))
		shOffAt, shSizeAt, shLinkAt, shInfoAt, word = 0x18, 0x20, 0x28, 0x2c, 8
	case elf.ELFCLASS32:
		phoff, shoff = uint64(bo.Uint32(h[0x1c:])), uint64(bo.Uint32(h[0x20:]))
		phent, phnum = uint64(bo.Uint16(h[0x2a:])), uint64(bo.Uint16(h[0x2c:]))
		shent, shnum = uint64(bo.Uint16(h[0x2e:])), uint64(bo.Uint16(h[0x30:]))
		shstrndx = uint64(bo.Uint16(h[0x32:]))
		shOffAt, shSizeAt, shLinkAt, shInfoAt, word = 0x10, 0x14, 0x18, 0x1c, 4
	default:
		return nil
	}
	// field reads a field of section header i; ok is false beyond the file.
	field := func(i, at, width uint64) (uint64, bool) {
		off := shoff + i*shent + at
		if shent == 0 || i > uint64(size)/shent || off < shoff || off > uint64(size) || uint64(size)-off < width {
			return 0, false
		}
		var b [8]byte
		if _, err := r.ReadAt(b[:width], int64(off)); err != nil {
			return 0, false
		}
		if width == 4 {
			return uint64(bo.Uint32(b[:])), true
		}
		return bo.Uint64(b[:]), true
	}
	// Extended numbering: the counts live in section header 0.
	if shoff != 0 && (shnum == 0 || phnum == 0xffff || shstrndx == uint64(elf.SHN_XINDEX)) {
		var ok0, ok1, ok2 bool = true, true, true
		if shnum == 0 {
			shnum, ok0 = field(0, shSizeAt, word)
		}
		if phnum == 0xffff {
			phnum, ok1 = field(0, shInfoAt, 4)
		}
		if shstrndx == uint64(elf.SHN_XINDEX) {
			shstrndx, ok2 = field(0, shLinkAt, 4)
		}
		if !ok0 || !ok1 || !ok2 {
			return fmt.Errorf("section header table at offset %#x is beyond the file's %d bytes", shoff, size)
		}
	}
	fits := func(off, ent, num uint64) bool {
		return num == 0 || off <= uint64(size) && ent != 0 && num <= (uint64(size)-off)/ent
	}
	if !fits(phoff, phent, phnum) {
		return fmt.Errorf("%d program headers of %d bytes at offset %#x do not fit in the file's %d bytes", phnum, phent, phoff, size)
	}
	if shoff != 0 && !fits(shoff, shent, shnum) {
		return fmt.Errorf("%d section headers of %d bytes at offset %#x do not fit in the file's %d bytes", shnum, shent, shoff, size)
	}
	// debug/elf reads the section names at once.
	if shoff != 0 && shstrndx != 0 && shstrndx < shnum {
		off, ok1 := field(shstrndx, shOffAt, word)
		n, ok2 := field(shstrndx, shSizeAt, word)
		if typ, ok := field(shstrndx, 4, 4); ok && elf.SectionType(typ) == elf.SHT_NOBITS {
			return nil
		}
		if !ok1 || !ok2 || off > uint64(size) || n > uint64(size)-off {
			return fmt.Errorf("section name table (section %d) of %d bytes at offset %#x is beyond the file's %d bytes", shstrndx, n, off, size)
		}
	}
	return nil
}
