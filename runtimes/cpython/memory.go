package cpython

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Memory reads the target's memory. A read that gets fewer than len(p)
// bytes returns an error. *addrspace.Memory (process_vm_readv) is one.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// ReadError says which structure could not be read, and where.
type ReadError struct {
	What string // "PyThreadState", "code object's co_name"
	Addr uint64
	Err  error
}

func (e *ReadError) Error() string {
	return fmt.Sprintf("read %s at %#x: %v", e.What, e.Addr, e.Err)
}

func (e *ReadError) Unwrap() error { return e.Err }

// ErrBadPointer is what a ReadError wraps when the pointer to a structure
// cannot be one: null, misaligned, or outside user space.
var ErrBadPointer = errors.New("not a valid pointer")

// Bounds of what one read may take: a structure is read whole in one
// read of at most maxStruct bytes; strings and line tables have their own
// bounds (maxName, maxLineTable).
const (
	pageSize  = 4096
	maxStruct = 8192
	// userTop is above every user-space address on x86-64 and arm64
	// (47 and 48 bits; 5-level paging is opt-in per mapping).
	userTop = 1 << 48
	// cachePages is the page cache's size: the frames of one thread
	// (3.11+: in one data stack chunk) and the code objects they run
	// fall on a few pages.
	cachePages = 32
)

// reader reads structures from the target through a small cache of
// whole pages, emptied at the start of each walk (reset): within one walk
// a page is read once, so that a 3.11+ thread's frames, which lie side by
// side in its data stack, cost a read or two rather than one per frame.
// It also counts reads against a budget, so that no walk over garbage
// costs more than a bound.
type reader struct {
	mem    Memory
	epoch  uint64
	pages  [cachePages]cachedPage
	reads  int // reads of the target's memory since reset
	budget int // most reads allowed between resets
	spent  int // bytes allocated for what was read since reset
	total  uint64
}

type cachedPage struct {
	addr  uint64 // page address
	epoch uint64 // valid when equal to reader.epoch
	ok    bool   // false: the page is not readable
	data  [pageSize]byte
}

// errBudget ends a walk that read more than its budget.
var errBudget = errors.New("read budget exhausted: the structures do not end (garbage or a cycle)")

func (r *reader) reset(budget int) {
	r.epoch++
	r.reads = 0
	r.budget = budget
	r.spent = 0
}

// maxWalkBytes bounds what one walk allocates for strings and line
// tables: sizes come from the target.
const maxWalkBytes = 8 << 20

// errTooMuch ends a walk whose objects claim more bytes than it may take.
var errTooMuch = errors.New("the objects read claim more memory than a walk may take")

// spend charges n bytes about to be allocated to the walk.
func (r *reader) spend(n int) error {
	if n > maxWalkBytes-r.spent {
		return errTooMuch
	}
	r.spent += n
	return nil
}

// read fills p from addr, through the page cache.
func (r *reader) read(p []byte, addr uint64) error {
	if addr == 0 || addr >= userTop || addr+uint64(len(p)) > userTop || addr+uint64(len(p)) < addr {
		return ErrBadPointer
	}
	if len(p) > 2*pageSize {
		return r.readDirect(p, addr)
	}
	for len(p) > 0 {
		base := addr &^ (pageSize - 1)
		pg, err := r.page(base)
		if err != nil {
			return err
		}
		n := copy(p, pg.data[addr-base:])
		p = p[n:]
		addr += uint64(n)
	}
	return nil
}

func (r *reader) readDirect(p []byte, addr uint64) error {
	if r.reads >= r.budget {
		return errBudget
	}
	r.reads++
	r.total++
	_, err := r.mem.ReadAt(p, addr)
	return err
}

func (r *reader) page(base uint64) (*cachedPage, error) {
	pg := &r.pages[(base/pageSize)%cachePages]
	if pg.epoch == r.epoch && pg.addr == base {
		if !pg.ok {
			return nil, errUnmapped
		}
		return pg, nil
	}
	if r.reads >= r.budget {
		return nil, errBudget
	}
	r.reads++
	r.total++
	pg.addr, pg.epoch = base, r.epoch
	_, err := r.mem.ReadAt(pg.data[:], base)
	pg.ok = err == nil
	if err != nil {
		return nil, err
	}
	return pg, nil
}

// errUnmapped is a page this walk already found unreadable.
var errUnmapped = errors.New("address not readable")

// structAt reads size bytes of the structure what at addr, which must be
// aligned to align.
func (r *reader) structAt(what string, addr uint64, size int64, align uint64, buf []byte) ([]byte, error) {
	if size <= 0 || size > maxStruct {
		return nil, &ReadError{What: what, Addr: addr, Err: fmt.Errorf("size %d out of bounds", size)}
	}
	if addr == 0 || addr%align != 0 {
		return nil, &ReadError{What: what, Addr: addr, Err: ErrBadPointer}
	}
	if cap(buf) < int(size) {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	if err := r.read(buf, addr); err != nil {
		return nil, &ReadError{What: what, Addr: addr, Err: err}
	}
	return buf, nil
}

// field readers over a structure read whole; an offset of -1 (a field
// the version lacks) or one outside b reads as zero.

func u64(b []byte, off int64) uint64 {
	if off < 0 || off+8 > int64(len(b)) {
		return 0
	}
	return binary.LittleEndian.Uint64(b[off:])
}

func u32(b []byte, off int64) uint32 {
	if off < 0 || off+4 > int64(len(b)) {
		return 0
	}
	return binary.LittleEndian.Uint32(b[off:])
}

func u8(b []byte, off int64) uint8 {
	if off < 0 || off >= int64(len(b)) {
		return 0
	}
	return b[off]
}

// fieldsEnd is the end of the last of the fields at offs: how much of a
// structure must be read to have them all (8 bytes each, the widest).
func fieldsEnd(offs ...int64) int64 {
	var end int64
	for _, o := range offs {
		end = max(end, o+8)
	}
	return end
}
