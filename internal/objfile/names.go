package objfile

import (
	"debug/elf"
	"fmt"
)

// Named is a symbol found by its name: its link-time address and size.
type Named struct {
	Addr, Size uint64
}

// LookupNames returns those of names the file defines in .dynsym or
// .symtab, whatever their type (functions, data, thread-local
// variables), at their link-time addresses: what a runtime's reader
// needs to find its structures (_PyRuntime, PyCode_Type). One pass over
// each table, reading nothing beyond the sections' sizes.
func (f *File) LookupNames(names []string) (map[string]Named, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.readable() {
		return nil, ErrClosed
	}
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := map[string]Named{}
	var errs error
	for _, typ := range []elf.SectionType{elf.SHT_DYNSYM, elf.SHT_SYMTAB} {
		sec := f.symbolSection(typ)
		if sec == nil {
			continue
		}
		err := safely(f.Name, func() error { return f.lookupIn(sec, want, out) })
		if err != nil && errs == nil {
			errs = err
		}
	}
	return out, errs
}

// lookupIn adds to out the symbols of sec whose names want holds.
func (f *File) lookupIn(sec *elf.Section, want map[string]bool, out map[string]Named) error {
	if sec.Link == 0 || int(sec.Link) >= len(f.ef.Sections) {
		return fmt.Errorf("%s: section %s: string table index %d out of range", f.Name, sec.Name, sec.Link)
	}
	if sec.Size > uint64(f.size) {
		return fmt.Errorf("%s: section %s at offset %#x claims %d bytes, the file has %d", f.Name, sec.Name, sec.Offset, sec.Size, f.size)
	}
	data, err := sec.Data()
	if err != nil {
		return fmt.Errorf("%s: section %s at offset %#x: %w", f.Name, sec.Name, sec.Offset, err)
	}
	strsec := f.ef.Sections[sec.Link]
	if strsec.Type != elf.SHT_STRTAB || strsec.Size > uint64(f.size) {
		return fmt.Errorf("%s: section %s: linked section %s is not a string table", f.Name, sec.Name, strsec.Name)
	}
	strs, err := strsec.Data()
	if err != nil {
		return fmt.Errorf("%s: section %s at offset %#x: %w", f.Name, strsec.Name, strsec.Offset, err)
	}
	const entsize = 24 // Elf64_Sym
	if f.ef.Class != elf.ELFCLASS64 {
		return nil
	}
	bo := f.ef.ByteOrder
	for i := entsize; i+entsize <= len(data); i += entsize {
		e := data[i : i+entsize]
		name, shndx, addr := bo.Uint32(e[0:]), bo.Uint16(e[6:]), bo.Uint64(e[8:])
		if shndx == uint16(elf.SHN_UNDEF) || int(name) >= len(strs) {
			continue
		}
		n := cstringAt(strs, int(name))
		if !want[n] {
			continue
		}
		if _, have := out[n]; !have {
			out[n] = Named{Addr: addr, Size: bo.Uint64(e[16:])}
		}
	}
	return nil
}

// cstringAt is the NUL-terminated string at b[off:].
func cstringAt(b []byte, off int) string {
	for i := off; i < len(b); i++ {
		if b[i] == 0 {
			return string(b[off:i])
		}
	}
	return string(b[off:])
}

// SectionHeader is one section that occupies memory at run time.
type SectionHeader struct {
	Name       string
	Addr, Size uint64 // link-time address
	Writable   bool
}

// Sections lists the file's allocated sections (SHF_ALLOC): where its
// data lies once loaded, for a reader that must find a structure no
// symbol names.
func (f *File) Sections() []SectionHeader {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ef == nil {
		return nil
	}
	var out []SectionHeader
	for _, s := range f.ef.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Size > 0 {
			out = append(out, SectionHeader{Name: s.Name, Addr: s.Addr, Size: s.Size, Writable: s.Flags&elf.SHF_WRITE != 0})
		}
	}
	return out
}
