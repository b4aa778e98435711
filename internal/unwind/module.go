package unwind

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"sync"
	"weak"

	"golang.org/x/sys/unix"
)

// moduleCFI is the call frame information of one ELF file, with what is
// needed to place it at run time.
type moduleCFI struct {
	eh    *ehFrame // nil when the file has none
	gotab *goTable // a Go binary's frame sizes; nil for other files
	// goErr says why a Go binary's pclntab could not be used.
	goErr error
	loads []elf.ProgHeader
	// bad counts FDEs that failed to parse (skipped).
	bad int
}

// fileKey identifies a file's content well enough to share its parsed
// tables between processes: the same inode with the same size and
// modification time.
type fileKey struct {
	dev, ino    uint64
	size, mtime int64
}

// fileCache shares parsed tables between every Process that maps a file.
// Entries are weak: a table lives while some Process uses it.
var fileCache struct {
	sync.Mutex
	m map[fileKey]weak.Pointer[moduleCFI]
}

// loadFileCFI returns the CFI of the open file f, from the cache when the
// same file was parsed before.
func loadFileCFI(f *os.File, name string) (*moduleCFI, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", name, err)
	}
	key := fileKey{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano()}
	fileCache.Lock()
	if wp, ok := fileCache.m[key]; ok {
		if m := wp.Value(); m != nil {
			fileCache.Unlock()
			return m, nil
		}
	}
	fileCache.Unlock()
	m, err := parseModule(f, st.Size, name)
	if err != nil {
		return nil, err
	}
	fileCache.Lock()
	if fileCache.m == nil {
		fileCache.m = make(map[fileKey]weak.Pointer[moduleCFI])
	}
	for k, wp := range fileCache.m {
		if wp.Value() == nil {
			delete(fileCache.m, k)
		}
	}
	fileCache.m[key] = weak.Make(m)
	fileCache.Unlock()
	return m, nil
}

// parseModule reads an ELF file's program headers and .eh_frame. The file
// comes from the target and is untrusted: debug/elf bounds what it reads
// by the file's size, and a panic in it is turned into an error.
func parseModule(r io.ReaderAt, size int64, name string) (m *moduleCFI, err error) {
	defer func() {
		if p := recover(); p != nil {
			m, err = nil, fmt.Errorf("%s: malformed ELF file: %v", name, p)
		}
	}()
	var magic [4]byte
	if _, err := r.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		// Not code a linker made: a JIT's jitdump mapped executable so
		// that perf records it, for one. Nothing to unwind with.
		return &moduleCFI{}, nil
	}
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if ef.Machine != elf.EM_X86_64 || ef.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("%s: %s %s is not x86-64", name, ef.Class, ef.Machine)
	}
	m = &moduleCFI{}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			m.loads = append(m.loads, p.ProgHeader)
		}
	}
	// A Go binary has no .eh_frame for its Go code; its pclntab says the
	// same thing in Go's own terms. A broken one costs only itself.
	m.gotab, m.goErr = readGoTable(ef, r, size, name)
	data, addr, err := ehFrameData(ef, r, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if data == nil {
		return m, nil
	}
	eh, bad, err := parseEhFrame(name, data, addr)
	if err != nil {
		return nil, err
	}
	m.eh, m.bad = eh, bad
	return m, nil
}

// ehFrameData finds .eh_frame by its section header or, in a file without
// section headers, through PT_GNU_EH_FRAME and .eh_frame_hdr (what the
// runtime unwinder uses).
func ehFrameData(ef *elf.File, r io.ReaderAt, size int64) ([]byte, uint64, error) {
	if s := ef.Section(".eh_frame"); s != nil && s.Type != elf.SHT_NOBITS {
		if s.Size > maxSection || int64(s.Offset)+int64(s.Size) > size || int64(s.Offset) < 0 {
			return nil, 0, fmt.Errorf(".eh_frame at offset %#x size %#x is outside the file (%d bytes)", s.Offset, s.Size, size)
		}
		b, err := s.Data()
		if err != nil {
			return nil, 0, fmt.Errorf("read .eh_frame: %w", err)
		}
		return b, s.Addr, nil
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_GNU_EH_FRAME {
			continue
		}
		if p.Filesz < 8 {
			return nil, 0, fmt.Errorf("PT_GNU_EH_FRAME of %d bytes", p.Filesz)
		}
		hdr := make([]byte, min(p.Filesz, 16))
		if _, err := r.ReadAt(hdr, int64(p.Off)); err != nil {
			return nil, 0, fmt.Errorf("read .eh_frame_hdr at %#x: %w", p.Off, err)
		}
		hr := &ebuf{b: hdr, name: ".eh_frame_hdr"}
		if v := hr.u8(); v != 1 {
			return nil, 0, fmt.Errorf(".eh_frame_hdr version %d", v)
		}
		enc := hr.u8()
		hr.u8() // fde_count encoding
		hr.u8() // table encoding
		ptr := hr.pointer(enc, p.Vaddr, p.Vaddr)
		if hr.err != nil {
			return nil, 0, hr.err
		}
		// .eh_frame ends with its PT_LOAD segment at the latest.
		for _, l := range ef.Progs {
			if l.Type == elf.PT_LOAD && ptr >= l.Vaddr && ptr < l.Vaddr+l.Filesz {
				off := l.Off + (ptr - l.Vaddr)
				n := l.Vaddr + l.Filesz - ptr
				if n > maxSection || int64(off+n) > size {
					return nil, 0, fmt.Errorf(".eh_frame at %#x is outside the file", ptr)
				}
				b := make([]byte, n)
				if _, err := r.ReadAt(b, int64(off)); err != nil {
					return nil, 0, fmt.Errorf("read .eh_frame at %#x: %w", off, err)
				}
				return b, ptr, nil
			}
		}
		return nil, 0, fmt.Errorf(".eh_frame_hdr points to %#x, in no loaded segment", ptr)
	}
	return nil, 0, nil
}

// bias returns the load bias of a mapping of this module: run-time
// address minus link-time address, from the PT_LOAD segment whose file
// range the mapping shows.
func (m *moduleCFI) bias(start, end, offset uint64) (uint64, bool) {
	for _, p := range m.loads {
		pageOff := p.Off &^ 0xfff
		if offset >= pageOff && offset < p.Off+p.Filesz {
			// run-time of file offset o = start + (o - offset);
			// link-time of o = p.Vaddr + (o - p.Off).
			return start - offset + p.Off - p.Vaddr, true
		}
	}
	return 0, false
}

// parseMemoryModule parses an ELF image copied from the target's memory
// (the vDSO).
func parseMemoryModule(b []byte, name string) (*moduleCFI, error) {
	return parseModule(bytes.NewReader(b), int64(len(b)), name)
}
