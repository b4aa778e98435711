package objfile

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"

	"github.com/stallwatch/stallwatch/internal/callframe"
)

// File is one ELF image: a file on disk, shared by every mapping of it in
// every target (see Open), or an image read from memory (the vdso). Its
// headers and build id are read when it is opened; its symbols, lines,
// call frame information and Go table the first time they are asked for,
// once.
type File struct {
	// Path is the file as the target names it (a maps path, "[vdso]").
	Path string
	// Name is where it was read from, for errors.
	Name    string
	BuildID string

	id     ID          // zero for images read from memory
	cached atomic.Bool // in the process-wide cache

	mu    sync.Mutex
	refs  int
	r     io.ReaderAt // nil once the last user closed it
	size  int64
	c     io.Closer
	ef    *elf.File
	loads []elf.ProgHeader // PT_LOAD segments
	// Origin is "" for files and says where an image read from memory
	// came from ("memory", "memory (stallwatch's own vdso)").
	Origin string

	cfiDone bool
	cfi     *callframe.Table
	cfiErr  error
	goDone  bool
	gotab   *GoTable
	goErr   error
	rtDone  bool
	rt      *GoRuntime
	rtErr   error
	syms    map[string]*Symbols // by Env.Key
	bytes   atomic.Int64        // parsed data held, for the cache's bound
	used    uint64              // the cache's LRU clock
}

// safely runs f, turning a panic inside a parser (the standard library's
// ELF and DWARF readers see untrusted bytes) into an error that names the
// file. It is a last net: the fuzz targets fail when it catches anything
// (recoveredPanics), and the input is then checked before.
func safely(name string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			recoveredPanics.Add(1)
			err = fmt.Errorf("%s: malformed file (parser panicked: %v)", name, v)
		}
	}()
	return f()
}

// recoveredPanics counts the panics safely caught.
var recoveredPanics atomic.Int64

// ErrNotELF is wrapped by the error of a file that is not an ELF file: a
// jitdump a JIT maps executable so that perf records it, for one.
var ErrNotELF = errors.New("not an ELF file")

// newFile reads the ELF headers and the build id of an image.
func newFile(path, name string, r io.ReaderAt, size int64, c io.Closer) (*File, error) {
	var magic [4]byte
	if _, err := r.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		return nil, fmt.Errorf("%s: %w", name, ErrNotELF)
	}
	f := &File{Path: path, Name: name, refs: 1}
	if err := f.attach(r, size, c); err != nil {
		return nil, err
	}
	f.BuildID = readBuildID(f.ef)
	return f, nil
}

// attach gives the file a reader to parse from (again, after the last
// user closed the one it had).
func (f *File) attach(r io.ReaderAt, size int64, c io.Closer) error {
	if err := checkHeaderTables(r, size); err != nil {
		return fmt.Errorf("%s: %w", f.Name, err)
	}
	var ef *elf.File
	err := safely(f.Name, func() error {
		var err error
		if ef, err = elf.NewFile(r); err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	f.r, f.size, f.c, f.ef = r, size, c, ef
	f.loads = f.loads[:0]
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			f.loads = append(f.loads, p.ProgHeader)
		}
	}
	return nil
}

// Open returns the File of an ELF file we hold a descriptor for, from the
// process-wide cache when the same file (the same inode, unchanged since)
// was opened before; Open owns fd (it is closed when the File does not
// need it). path is the file as the target names it. Each Open must be
// matched by a Close.
func Open(fd *os.File, path string) (*File, error) {
	size, err := regularSize(fd)
	if err != nil {
		return nil, err
	}
	id, ok := idOf(fd)
	if !ok {
		return openUncached(fd, path, size)
	}
	if f := cache.acquire(id, fd, path); f != nil {
		return f, nil
	}
	f, err := openUncached(fd, path, size)
	if err != nil {
		return nil, err
	}
	f.id = id
	return cache.add(f), nil
}

// regularSize returns the size of the regular file fd, or closes fd and
// says why it is not one.
func regularSize(fd *os.File) (int64, error) {
	st, err := fd.Stat()
	if err != nil {
		fd.Close()
		return 0, err
	}
	if !st.Mode().IsRegular() {
		fd.Close()
		return 0, fmt.Errorf("%s: not a regular file", fd.Name())
	}
	return st.Size(), nil
}

func openUncached(fd *os.File, path string, size int64) (*File, error) {
	f, err := newFile(path, fd.Name(), fd, size, fd)
	if err != nil {
		fd.Close()
		return nil, err
	}
	return f, nil
}

// OpenImage wraps an image read from memory (the vdso); it is not cached.
func OpenImage(path, name string, b []byte) (*File, error) {
	return newFile(path, name, bytes.NewReader(b), int64(len(b)), nil)
}

// Close releases a user of f. When the last one goes, its descriptor is
// closed; what was parsed stays in the cache for the next Open of the
// same file.
func (f *File) Close() {
	if f.cached.Load() {
		cache.release(f)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refs--
	if f.refs <= 0 {
		f.detach()
	}
}

// detach lets the descriptor go (f.mu held).
func (f *File) detach() {
	if f.c != nil {
		f.c.Close()
	}
	f.r, f.c, f.ef = nil, nil, nil
}

// readable reports whether f can still parse (f.mu held).
func (f *File) readable() bool { return f.ef != nil }

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

// Bias returns what to subtract from a run-time address in a mapping of
// the file (at start, of the file from offset) to get the ELF virtual
// address: the segment whose file range holds the mapping's offset says
// where that offset was linked. This covers PIE executables, shared
// objects, and segments whose address differs from their file offset
// (node's text). ok is false when no segment holds the offset (the
// mapping's own start then stands for the file's).
func (f *File) Bias(start, offset uint64, exec bool) (uint64, bool) {
	const page = 4096
	f.mu.Lock()
	defer f.mu.Unlock()
	var best *elf.ProgHeader
	for i := range f.loads {
		p := &f.loads[i]
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

// Machine is the file's ELF machine and class.
func (f *File) Machine() (elf.Machine, elf.Class) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ef == nil {
		return elf.EM_NONE, elf.ELFCLASSNONE
	}
	return f.ef.Machine, f.ef.Class
}

// section returns the named section's data when it is present and not
// larger than the file (a lying size is an error, not an allocation).
func (f *File) section(name string) ([]byte, error) {
	s := f.ef.Section(name)
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if s.Flags&elf.SHF_COMPRESSED == 0 && s.Size > uint64(f.size) {
		return nil, fmt.Errorf("%s: section %s at offset %#x claims %d bytes, the file has %d", f.Name, name, s.Offset, s.Size, f.size)
	}
	if s.Flags&elf.SHF_COMPRESSED != 0 && (s.Size > maxInflated || s.Size/maxInflateRatio > s.FileSize) {
		return nil, fmt.Errorf("%s: compressed section %s at offset %#x would inflate %d bytes to %d: refused", f.Name, name, s.Offset, s.FileSize, s.Size)
	}
	var data []byte
	err := safely(f.Name, func() error {
		var err error
		data, err = s.Data()
		if err != nil {
			return fmt.Errorf("%s: section %s at offset %#x: %w", f.Name, name, s.Offset, err)
		}
		return nil
	})
	return data, err
}

// zdebugSection reads a section in GNU's older compressed format
// (.zdebug_*: "ZLIB", the inflated size as 8 big-endian bytes, a zlib
// stream), with the same bounds as SHF_COMPRESSED sections.
func (f *File) zdebugSection(name string) ([]byte, error) {
	b, err := f.section(name)
	if err != nil || b == nil {
		return nil, err
	}
	if len(b) < 12 || string(b[:4]) != "ZLIB" {
		return b, nil // stored uncompressed
	}
	size := binary.BigEndian.Uint64(b[4:12])
	if size > maxInflated || size/maxInflateRatio > uint64(len(b)) {
		return nil, fmt.Errorf("%s: compressed section %s would inflate %d bytes to %d: refused", f.Name, name, len(b), size)
	}
	zr, err := zlib.NewReader(bytes.NewReader(b[12:]))
	if err != nil {
		return nil, fmt.Errorf("%s: section %s: %w", f.Name, name, err)
	}
	out := make([]byte, size)
	if _, err := io.ReadFull(zr, out); err != nil {
		return nil, fmt.Errorf("%s: section %s: %w", f.Name, name, err)
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
func (f *File) hasSection(name string) bool {
	s := f.ef.Section(name)
	return s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0
}

// symbolSection returns the section of the given type, if any.
func (f *File) symbolSection(typ elf.SectionType) *elf.Section {
	for _, s := range f.ef.Sections {
		if s.Type == typ && s.Size > 0 {
			return s
		}
	}
	return nil
}

// ErrClosed is returned for a part of a File asked for after its last
// user closed it.
var ErrClosed = fmt.Errorf("objfile: file closed")

// CFI returns the file's call frame information: .eh_frame (found by its
// section header, or through PT_GNU_EH_FRAME in a file without section
// headers), else .debug_frame. Nil without error when it has none (a Go
// binary's Go code, a jitdump mapped executable).
func (f *File) CFI() (*callframe.Table, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cfiDone {
		return f.cfi, f.cfiErr
	}
	if !f.readable() {
		return nil, ErrClosed
	}
	f.cfiDone = true
	f.cfiErr = safely(f.Name, func() error {
		var err error
		f.cfi, err = f.readCFI()
		return err
	})
	if f.cfi != nil {
		f.grow(f.cfi.SizeBytes())
	}
	return f.cfi, f.cfiErr
}

func (f *File) readCFI() (*callframe.Table, error) {
	if f.ef.Machine != elf.EM_X86_64 || f.ef.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("%s: %s %s is not x86-64", f.Name, f.ef.Class, f.ef.Machine)
	}
	data, addr, err := callframe.EhFrameSection(f.ef, f.r, f.size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Name, err)
	}
	if data != nil {
		return callframe.ParseEhFrame(f.Name, data, addr)
	}
	if f.hasSection(".gopclntab") {
		// A Go binary's .debug_frame says what its pclntab says, which
		// is what its Go code is unwound with.
		return nil, nil
	}
	dbg, err := f.section(".debug_frame")
	if err != nil || dbg == nil {
		return nil, err
	}
	return callframe.ParseDebugFrame(f.Name, dbg)
}

// Go returns the file's Go table (pclntab); nil without error for a file
// that is not a Go binary.
func (f *File) Go() (*GoTable, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.goLocked()
}

func (f *File) goLocked() (*GoTable, error) {
	if f.goDone {
		return f.gotab, f.goErr
	}
	if !f.readable() {
		return nil, ErrClosed
	}
	f.goDone = true
	f.goErr = safely(f.Name, func() error {
		var err error
		f.gotab, err = f.goTableOf()
		return err
	})
	if f.gotab != nil {
		f.grow(f.gotab.sizeBytes())
	}
	return f.gotab, f.goErr
}

// grow accounts parsed data held (f.mu held).
func (f *File) grow(n int64) {
	f.bytes.Add(n)
	if f.cached.Load() {
		cache.grow(n)
	}
}
