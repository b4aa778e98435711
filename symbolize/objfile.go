package symbolize

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// objFile is one ELF image the target has mapped: a file on disk (shared
// by every mapping of it) or the vdso read from memory. Its headers and
// build id are read when it is opened; symbols and lines when an address
// in it is first looked up, and then kept.
type objFile struct {
	path string // as the target names it (maps path, or "[vdso]")
	name string // where we read it from, for errors
	r    io.ReaderAt
	size int64
	c    io.Closer // nil for in-memory images

	ef      *elf.File
	buildID string
	loads   []elf.ProgHeader // PT_LOAD segments

	loaded bool // symbols and lines were looked for
	syms   *symtab
	lines  lineSource // nil when the file has no line information
	debug  *objFile   // separate debug file, kept open for lazy DWARF
	// debugHow says how the debug file was found ("build-id PATH").
	debugHow string

	origin     string   // "" for files; "memory" for an image read from memory
	symSource  string   // which table named functions: "symtab", "dynsym", ...
	lineSource string   // where lines come from: "dwarf", "gopclntab", ...
	notes      []string // what is missing and why
}

// safely runs f, turning a panic inside a parser (the standard library's
// ELF, DWARF and gosym readers see untrusted bytes) into an error that
// names the file.
func safely(name string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%s: malformed file (parser panicked: %v)", name, v)
		}
	}()
	return f()
}

// newObjFile reads the ELF headers and the build id of an image.
func newObjFile(path, name string, r io.ReaderAt, size int64, c io.Closer) (*objFile, error) {
	o := &objFile{path: path, name: name, r: r, size: size, c: c}
	err := safely(name, func() error {
		ef, err := elf.NewFile(r)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		o.ef = ef
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, p := range o.ef.Progs {
		if p.Type == elf.PT_LOAD {
			o.loads = append(o.loads, p.ProgHeader)
		}
	}
	o.buildID = readBuildID(o.ef)
	return o, nil
}

// openObjFile opens an ELF file we hold a descriptor for; the objFile owns f.
func openObjFile(path string, f *os.File) (*objFile, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file", f.Name())
	}
	o, err := newObjFile(path, f.Name(), f, st.Size(), f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return o, nil
}

// memObjFile wraps an image read from memory (the vdso).
func memObjFile(path, name string, b []byte) (*objFile, error) {
	return newObjFile(path, name, bytes.NewReader(b), int64(len(b)), nil)
}

func (o *objFile) close() {
	if o.debug != nil {
		o.debug.close()
		o.debug = nil
	}
	if o.c != nil {
		o.c.Close()
		o.c = nil
	}
}

// maxNoteSize bounds what is read of a note section or segment.
const maxNoteSize = 64 << 10

// readBuildID returns the hex GNU build id, from the note sections, or
// from the note segments of a file whose section headers were stripped.
func readBuildID(ef *elf.File) string {
	for _, s := range ef.Sections {
		if s.Type != elf.SHT_NOTE || s.Size > maxNoteSize {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(s.Open(), maxNoteSize))
		if err != nil {
			continue
		}
		if id := findBuildIDNote(b, ef.ByteOrder); id != "" {
			return id
		}
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > maxNoteSize {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p.Open(), maxNoteSize))
		if err != nil {
			continue
		}
		if id := findBuildIDNote(b, ef.ByteOrder); id != "" {
			return id
		}
	}
	return ""
}

// findBuildIDNote walks ELF notes (namesz, descsz, type, name, desc; name
// and desc padded to 4 bytes) for NT_GNU_BUILD_ID owned by "GNU".
func findBuildIDNote(b []byte, bo binary.ByteOrder) string {
	for len(b) >= 12 {
		namesz, descsz, typ := uint64(bo.Uint32(b)), uint64(bo.Uint32(b[4:])), bo.Uint32(b[8:])
		b = b[12:]
		nameEnd := align4(namesz)
		descEnd := nameEnd + align4(descsz)
		if nameEnd > uint64(len(b)) || descEnd > uint64(len(b)) {
			return ""
		}
		name := b[:namesz]
		desc := b[nameEnd : nameEnd+descsz]
		if typ == ntGNUBuildID && string(bytes.TrimRight(name, "\x00")) == "GNU" && len(desc) > 0 && len(desc) <= 64 {
			return hex.EncodeToString(desc)
		}
		b = b[descEnd:]
	}
	return ""
}

// ntGNUBuildID is the note type of a GNU build id (elf.h NT_GNU_BUILD_ID).
const ntGNUBuildID = 3

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// bias returns what to subtract from an address in the mapping to get the
// ELF virtual address: the segment whose file range holds the mapping's
// offset says where that offset was linked. This covers PIE executables,
// shared objects, and segments whose address differs from their file
// offset (node's text).
func (o *objFile) bias(start, offset uint64, exec bool) (uint64, bool) {
	const page = 4096
	var best *elf.ProgHeader
	for i := range o.loads {
		p := &o.loads[i]
		lo := p.Off &^ (page - 1)
		if offset < lo || offset >= p.Off+max(p.Filesz, 1) {
			continue
		}
		if best == nil || (exec && p.Flags&elf.PF_X != 0 && best.Flags&elf.PF_X == 0) {
			best = p
		}
	}
	if best == nil {
		return start - offset, false
	}
	return start + best.Off - offset - best.Vaddr, true
}

// section returns the named section's data when it is present and not
// larger than the file (a lying size is an error, not an allocation).
func (o *objFile) section(name string) ([]byte, error) {
	s := o.ef.Section(name)
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if s.Flags&elf.SHF_COMPRESSED == 0 && s.Size > uint64(o.size) {
		return nil, fmt.Errorf("%s: section %s at offset %#x claims %d bytes, the file has %d", o.name, name, s.Offset, s.Size, o.size)
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 && (s.Size > maxInflated || s.Size/maxInflateRatio > s.FileSize) {
		return nil, fmt.Errorf("%s: compressed section %s at offset %#x would inflate %d bytes to %d: refused", o.name, name, s.Offset, s.FileSize, s.Size)
	}
	var data []byte
	err := safely(o.name, func() error {
		var err error
		data, err = s.Data()
		if err != nil {
			return fmt.Errorf("%s: section %s at offset %#x: %w", o.name, name, s.Offset, err)
		}
		return nil
	})
	return data, err
}

// zdebugSection reads a section in GNU's older compressed format
// (.zdebug_*: "ZLIB", the inflated size as 8 big-endian bytes, a zlib
// stream), with the same bounds as SHF_COMPRESSED sections.
func (o *objFile) zdebugSection(name string) ([]byte, error) {
	b, err := o.section(name)
	if err != nil || b == nil {
		return nil, err
	}
	if len(b) < 12 || string(b[:4]) != "ZLIB" {
		return b, nil // stored uncompressed
	}
	size := binary.BigEndian.Uint64(b[4:12])
	if size > maxInflated || size/maxInflateRatio > uint64(len(b)) {
		return nil, fmt.Errorf("%s: compressed section %s would inflate %d bytes to %d: refused", o.name, name, len(b), size)
	}
	zr, err := zlib.NewReader(bytes.NewReader(b[12:]))
	if err != nil {
		return nil, fmt.Errorf("%s: section %s: %w", o.name, name, err)
	}
	out := make([]byte, size)
	if _, err := io.ReadFull(zr, out); err != nil {
		return nil, fmt.Errorf("%s: section %s: %w", o.name, name, err)
	}
	return out, nil
}

// Compressed debug sections inflate to at most maxInflated bytes and
// maxInflateRatio times their size in the file: zlib does about 10:1 on
// DWARF, a section claiming far more is a bomb.
const (
	maxInflated     = 1 << 30
	maxInflateRatio = 200
)

// hasSection reports whether the named section holds data in this file.
func (o *objFile) hasSection(name string) bool {
	s := o.ef.Section(name)
	return s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0
}
