package addrspace

import (
	"errors"
	"fmt"
	"os"

	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"golang.org/x/sys/unix"
)

// Memory reads the target's memory with process_vm_readv, through a live
// thread (the main thread of a process may have exited). The thread need
// not be stopped; reading needs the same permission as ptrace attach.
// Every read is bounded (MaxRead): sizes come from the target.
type Memory struct {
	tid int
}

// NewMemory reads the memory of the process of thread tid. A Space's
// Memory (which follows the live threads) is what readers of a target use.
func NewMemory(tid int) *Memory { return &Memory{tid: tid} }

// MaxRead bounds one read.
const MaxRead = 1 << 20

// ErrShort is wrapped by the error of a read that got fewer bytes than
// asked for: the rest is not mapped (or not readable).
var ErrShort = errors.New("address not readable")

// ReadAt reads len(p) bytes at addr. A short read returns what was read
// and an error wrapping ErrShort.
func (m *Memory) ReadAt(p []byte, addr uint64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) > MaxRead {
		return 0, fmt.Errorf("read %d bytes at %#x: more than %d at once", len(p), addr, MaxRead)
	}
	local := []unix.Iovec{{Base: &p[0]}}
	local[0].SetLen(len(p))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(p)}}
	n, err := unix.ProcessVMReadv(m.tid, local, remote, 0)
	if err != nil {
		if errors.Is(err, unix.EFAULT) {
			err = ErrShort
		}
		return 0, fmt.Errorf("read %d bytes at %#x in thread %d: %w", len(p), addr, m.tid, err)
	}
	if n < len(p) {
		return n, fmt.Errorf("read %d bytes at %#x in thread %d: only %d: %w", len(p), addr, m.tid, n, ErrShort)
	}
	return n, nil
}

// ReadPartial reads up to len(p) bytes at addr, page by page, and returns
// how many leading bytes it got: a stack that ends (or a guard page) before
// len(p) still yields what lies before it.
func (m *Memory) ReadPartial(p []byte, addr uint64) int {
	if len(p) == 0 || len(p) > MaxRead {
		return 0
	}
	const page = 4096
	var local []unix.Iovec
	var remote []unix.RemoteIovec
	for off := 0; off < len(p); {
		chunk := min(len(p)-off, int(page-(addr+uint64(off))%page))
		local = append(local, unix.Iovec{Base: &p[off]})
		local[len(local)-1].SetLen(chunk)
		remote = append(remote, unix.RemoteIovec{Base: uintptr(addr) + uintptr(off), Len: chunk})
		off += chunk
	}
	n, err := unix.ProcessVMReadv(m.tid, local, remote, 0)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// maxVDSO bounds what is read of a [vdso] mapping (it is two pages).
const maxVDSO = 1 << 20

// openVDSO reads the vdso image from the target's memory (it is a
// complete ELF file with .dynsym and .eh_frame), or, when the target's
// memory cannot be read, from ours: the kernel maps the same image into
// every process of its architecture.
func (s *Space) openVDSO(pm procfs.Mapping) *fileEntry {
	id := fileKey{path: fmt.Sprintf("[vdso]@%x", pm.Start)}
	if e, ok := s.files[id]; ok {
		return e
	}
	e := &fileEntry{}
	s.files[id] = e
	b := make([]byte, min(pm.End-pm.Start, maxVDSO))
	_, err := s.mem.ReadAt(b, pm.Start)
	if err == nil {
		e.f, err = objfile.OpenImage("[vdso]", fmt.Sprintf("[vdso] of pid %d", s.pid), b)
		if err == nil {
			e.f.Origin = "memory"
			return e
		}
	}
	own, ownErr := ownVDSO()
	if ownErr != nil {
		e.err = fmt.Errorf("vdso of pid %d: %w; our own: %w", s.pid, err, ownErr)
		return e
	}
	e.f = own
	e.f.Origin = "memory (stallwatch's own vdso)"
	e.err = fmt.Errorf("vdso of pid %d unreadable (%w): named from stallwatch's own, the same kernel image", s.pid, err)
	return e
}

func ownVDSO() (*objfile.File, error) {
	self := os.Getpid()
	maps, err := procfs.ReadMaps(self)
	if err != nil {
		return nil, err
	}
	for _, m := range maps {
		if m.Path != "[vdso]" {
			continue
		}
		b := make([]byte, min(m.End-m.Start, maxVDSO))
		if _, err := NewMemory(self).ReadAt(b, m.Start); err != nil {
			return nil, err
		}
		return objfile.OpenImage("[vdso]", "[vdso] of stallwatch", b)
	}
	return nil, fmt.Errorf("stallwatch has no [vdso] mapping")
}
