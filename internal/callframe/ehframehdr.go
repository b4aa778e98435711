package callframe

import (
	"debug/elf"
	"fmt"
	"io"
)

// EhFrameSection finds .eh_frame by its section header or, in a file
// without section headers, through PT_GNU_EH_FRAME and .eh_frame_hdr
// (what the runtime unwinder uses), and returns its bytes and link-time
// address; nil without error when the file has none. size is the file's,
// which no section may pass.
func EhFrameSection(ef *elf.File, r io.ReaderAt, size int64) ([]byte, uint64, error) {
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
