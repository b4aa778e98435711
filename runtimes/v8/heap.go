package v8

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Memory reads the target's memory; a short read returns an error.
// internal/addrspace.Memory and internal/unwind's stack copies are ones.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// Every question asked of a Reader is bounded, whatever the target's
// memory holds: at most maxReads reads of at most maxReadBytes together.
// A frame needs a dozen reads; a script's line table, when V8 has not
// computed it, a read of its source per chunk.
const (
	maxReads     = 4096
	maxReadBytes = 32 << 20
	chunk        = 64 << 10 // the largest single read
)

// ErrBudget is wrapped by the error of a question that would have read
// more than its bound: a structure too large to be real, or a cycle.
var ErrBudget = errors.New("read bound reached")

// ReadError is a read of the target's memory that failed: what was being
// read, where, and why.
type ReadError struct {
	What string // "JSFunction", "string", …
	Addr uint64
	Err  error
}

func (e *ReadError) Error() string { return fmt.Sprintf("%s at %#x: %v", e.What, e.Addr, e.Err) }
func (e *ReadError) Unwrap() error { return e.Err }

// ErrNotFrame is wrapped by the error of a frame pointer whose slots do
// not hold what a V8 frame holds: the frame is not V8's, or not yet (a
// function's prologue), or the memory is not what it was.
var ErrNotFrame = errors.New("not a V8 frame")

// TypeError is an object that is not of the type its referrer promises:
// garbage, a freed object, or a layout this reader got wrong.
type TypeError struct {
	What string // what was expected: "SharedFunctionInfo"
	Addr uint64 // the tagged value found
	Type uint16 // its instance type, 0 when it is no heap object
}

func (e *TypeError) Error() string {
	if e.Type == 0 {
		return fmt.Sprintf("%s expected, %#x is not a heap object", e.What, e.Addr)
	}
	return fmt.Sprintf("%s expected at %#x, instance type %d", e.What, e.Addr, e.Type)
}

// heap reads V8 objects within one question's budget, through a cache of
// whole pages: the objects of one frame (a function, its shared info,
// their maps) lie on a few pages, read once each. The cache holds what
// the target's memory was when read; forget drops it.
type heap struct {
	l     *Layout
	mem   Memory
	reads int // reads of the target's memory this question
	bytes int // bytes read of it
	ops   int // reads asked for, cached or not
	buf   [8]byte

	pages [cachePages]cachedPage
	epoch uint64 // pages of an older epoch are stale
	next  int    // the page to replace next
	since int    // reads of the target's memory since forget
}

const (
	pageSize   = 4096
	cachePages = 64
	// maxOps bounds the reads one question asks for, cached or not: a
	// cycle through cached pages costs no memory read but must end.
	maxOps = 1 << 16
)

type cachedPage struct {
	addr  uint64
	epoch uint64
	data  [pageSize]byte
}

func (h *heap) reset() { h.reads, h.bytes, h.ops = 0, 0, 0 }

// forget drops the cached pages: the target may have run since.
func (h *heap) forget() { h.epoch++; h.since = 0 }

// read fills p from addr, charged to the budget.
func (h *heap) read(what string, p []byte, addr uint64) error {
	if len(p) > chunk {
		return &ReadError{What: what, Addr: addr, Err: fmt.Errorf("%d bytes at once: %w", len(p), ErrBudget)}
	}
	if h.ops++; h.ops > maxOps {
		return &ReadError{What: what, Addr: addr, Err: ErrBudget}
	}
	if addr == 0 || addr+uint64(len(p)) < addr || addr+uint64(len(p)) > maxUserAddr {
		return &ReadError{What: what, Addr: addr, Err: errNotUser}
	}
	if len(p) <= pageSize {
		if err := h.cached(p, addr); err == nil {
			return nil
		}
	}
	if err := h.readTarget(p, addr); err != nil {
		return &ReadError{What: what, Addr: addr, Err: err}
	}
	return nil
}

// cached reads p from cached pages, filling the cache as it goes; it
// fails where a page cannot be read whole (the read is then made as
// asked).
func (h *heap) cached(p []byte, addr uint64) error {
	for len(p) > 0 {
		base := addr &^ (pageSize - 1)
		pg, err := h.page(base)
		if err != nil {
			return err
		}
		n := copy(p, pg.data[addr-base:])
		p, addr = p[n:], addr+uint64(n)
	}
	return nil
}

// page returns the cached page at base, reading it when it is not.
func (h *heap) page(base uint64) (*cachedPage, error) {
	for i := range h.pages {
		if pg := &h.pages[i]; pg.addr == base && pg.epoch == h.epoch && base != 0 {
			return pg, nil
		}
	}
	pg := &h.pages[h.next]
	if err := h.readTarget(pg.data[:], base); err != nil {
		pg.addr = 0
		return nil, err
	}
	h.next = (h.next + 1) % cachePages
	pg.addr, pg.epoch = base, h.epoch
	return pg, nil
}

// readTarget reads the target's memory, charged to the budget.
func (h *heap) readTarget(p []byte, addr uint64) error {
	h.reads++
	h.since++
	h.bytes += len(p)
	if h.reads > maxReads || h.bytes > maxReadBytes {
		return ErrBudget
	}
	_, err := h.mem.ReadAt(p, addr)
	return err
}

// maxUserAddr bounds user-space addresses on x86-64 and arm64 (47 and 48
// bits); anything above is garbage, not a pointer.
const maxUserAddr = 1 << 48

var errNotUser = errors.New("not a user-space address")

func (h *heap) word(what string, addr uint64) (uint64, error) {
	if err := h.read(what, h.buf[:8], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(h.buf[:8]), nil
}

func (h *heap) u16(what string, addr uint64) (uint16, error) {
	if err := h.read(what, h.buf[:2], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(h.buf[:2]), nil
}

func (h *heap) i32(what string, addr uint64) (int32, error) {
	if err := h.read(what, h.buf[:4], addr); err != nil {
		return 0, err
	}
	return int32(binary.LittleEndian.Uint32(h.buf[:4])), nil
}

// readBytes reads n bytes at addr a chunk at a time, growing what it returns
// only by what was read: a size from the target allocates nothing ahead.
func (h *heap) readBytes(what string, addr uint64, n int) ([]byte, error) {
	var out []byte
	for off := 0; off < n; off += chunk {
		k := min(chunk, n-off)
		out = append(out, make([]byte, k)...)
		if err := h.read(what, out[off:off+k], addr+uint64(off)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// isSmi reports whether a tagged value is a small integer.
func (l *Layout) isSmi(v uint64) bool { return v&l.smiTagMask == 0 }

// smi is a Smi's value (a word whose low 32 bits are zero on x86-64).
func (l *Layout) smi(v uint64) int64 { return int64(v) >> l.smiShift }

// object is the address of the heap object a tagged value points to, or
// false when it points to none.
func (l *Layout) object(v uint64) (uint64, bool) {
	if v&l.heapObjectTagMask != l.heapObjectTag {
		return 0, false
	}
	a := v &^ l.heapObjectTagMask
	return a, a != 0 && a < maxUserAddr && a&7 == 0
}

// typeOf returns the address and instance type of the object v points to.
func (h *heap) typeOf(what string, v uint64) (uint64, uint16, error) {
	obj, ok := h.l.object(v)
	if !ok {
		return 0, 0, &TypeError{What: what, Addr: v}
	}
	m, err := h.word(what+" map", obj+uint64(h.l.offMap))
	if err != nil {
		return 0, 0, err
	}
	mobj, ok := h.l.object(m)
	if !ok {
		return 0, 0, &TypeError{What: what + " map", Addr: m}
	}
	t, err := h.u16(what+" map", mobj+uint64(h.l.offInstanceType))
	if err != nil {
		return 0, 0, err
	}
	return obj, t, nil
}

// typed returns the address of the object v points to when it is of
// instance type in [lo, hi].
func (h *heap) typed(what string, v uint64, lo, hi uint16) (uint64, error) {
	obj, t, err := h.typeOf(what, v)
	if err != nil {
		return 0, err
	}
	if t < lo || t > hi {
		return 0, &TypeError{What: what, Addr: v, Type: t}
	}
	return obj, nil
}

// field reads the tagged field at off of the object at obj.
func (h *heap) field(what string, obj uint64, off int64) (uint64, error) {
	return h.word(what, obj+uint64(off))
}
