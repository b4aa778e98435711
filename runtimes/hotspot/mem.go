package hotspot

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Memory is the target's memory. ReadAt reads len(p) bytes at addr; a
// short read returns the bytes it got and an error. A live process's
// memory (process_vm_readv) and a core file satisfy it; so does a map of
// byte slices in a fuzz test.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// Symbols finds libjvm.so's symbols by name: the VMStructs tables and
// their entry layouts (exported), and the few statics the safepoint's
// state is read from (.symtab). Symbol returns the run-time address and
// size; ok is false when the image does not define it. (The method set is
// runtimes/cpython's, so one lookup serves both readers.)
type Symbols interface {
	Symbol(name string) (addr, size uint64, ok bool)
}

// ErrBudget is wrapped by the error of a read past a Reader's budget: the
// structures read so far asked for more memory than any real JVM's do,
// which a cycle or garbage in the target's memory would.
var ErrBudget = errors.New("read budget exhausted")

// ErrNull is wrapped by the error of a read through a null pointer.
var ErrNull = errors.New("null pointer")

// MemoryError says which read failed: the address, the length, what was
// being read (a VMStructs field, "Symbol body") and why.
type MemoryError struct {
	Addr uint64
	Len  int
	What string
	Err  error
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("read %d bytes of %s at %#x: %v", e.Len, e.What, e.Addr, e.Err)
}

func (e *MemoryError) Unwrap() error { return e.Err }

// Limits bound what one Reader reads from the target, whatever its memory
// holds.
type Limits struct {
	// Bytes is the most a Reader reads in all (cached pages count once).
	Bytes int64
	// Pages is the most pages it keeps cached.
	Pages int
	// Reads is the most reads it answers, cached or not: garbage that
	// leads a walk in circles through cached pages ends there.
	Reads int64
}

// DefaultLimits fit a JVM of thousands of threads and a full code cache:
// a snapshot of a 200-thread JVM reads about 2 MiB in 60,000 reads.
var DefaultLimits = Limits{Bytes: 256 << 20, Pages: 8192, Reads: 64 << 20}

const pageSize = 4096

// Reader reads the target's memory through a page cache, within Limits:
// the structures HotSpot publishes are small and close together (a
// thread's fields, the strings of a VMStructs entry), so reading whole
// pages turns thousands of small reads into a few. It is not safe for
// concurrent use; make one per reading of the target (the cache keeps
// what the target held when it was read).
type Reader struct {
	mem    Memory
	limits Limits
	spent  int64
	reads  int64
	pages  map[uint64]*page
	// used, when set, hears of every range a reader took from the cache
	// (tests record real images with it).
	used func(addr uint64, n int)
}

type page struct {
	b []byte // the bytes read; shorter than pageSize where the read stopped
}

// NewReader reads mem within limits; zero fields take DefaultLimits's.
func NewReader(mem Memory, limits Limits) *Reader {
	if limits.Bytes <= 0 {
		limits.Bytes = DefaultLimits.Bytes
	}
	if limits.Pages <= 0 {
		limits.Pages = DefaultLimits.Pages
	}
	if limits.Reads <= 0 {
		limits.Reads = DefaultLimits.Reads
	}
	return &Reader{mem: mem, limits: limits, pages: map[uint64]*page{}}
}

// Spent is how many bytes the Reader has read from the target.
func (r *Reader) Spent() int64 { return r.spent }

// Reads is how many reads it has answered.
func (r *Reader) Reads() int64 { return r.reads }

// Exhausted says whether the Reader's limits are reached: any further
// read fails.
func (r *Reader) Exhausted() bool {
	return r.reads >= r.limits.Reads || r.spent+pageSize > r.limits.Bytes
}

// count charges one read, failing past the limit.
func (r *Reader) count() error {
	if r.reads++; r.reads > r.limits.Reads {
		return ErrBudget
	}
	return nil
}

// page returns the cached page at base, reading it first.
func (r *Reader) page(base uint64) (*page, error) {
	if p, ok := r.pages[base]; ok {
		return p, nil
	}
	if r.spent+pageSize > r.limits.Bytes {
		return nil, ErrBudget
	}
	if len(r.pages) >= r.limits.Pages {
		clear(r.pages) // forget everything: simple, and bounded
	}
	r.spent += pageSize
	buf := make([]byte, pageSize)
	n, err := r.mem.ReadAt(buf, base)
	if n < 0 || n > pageSize {
		n = 0
	}
	p := &page{b: buf[:n]}
	r.pages[base] = p
	if n == 0 && err == nil {
		err = errors.New("read returned nothing")
	}
	if n == 0 {
		return p, err
	}
	return p, nil
}

// read fills p from addr; what names the data for the error.
func (r *Reader) read(p []byte, addr uint64, what string) error {
	if addr == 0 {
		return &MemoryError{Addr: addr, Len: len(p), What: what, Err: ErrNull}
	}
	if addr+uint64(len(p)) < addr {
		return &MemoryError{Addr: addr, Len: len(p), What: what, Err: errors.New("address range wraps")}
	}
	if err := r.count(); err != nil {
		return &MemoryError{Addr: addr, Len: len(p), What: what, Err: err}
	}
	done := 0
	for done < len(p) {
		a := addr + uint64(done)
		base := a &^ (pageSize - 1)
		pg, err := r.page(base)
		off := int(a - base)
		if err == nil && off >= len(pg.b) {
			err = errors.New("address not readable")
		}
		if err != nil {
			return &MemoryError{Addr: addr, Len: len(p), What: what, Err: err}
		}
		n := copy(p[done:], pg.b[off:])
		if r.used != nil {
			r.used(a, n)
		}
		done += n
	}
	return nil
}

// Bytes reads n bytes at addr (n at most maxBytes).
func (r *Reader) Bytes(addr uint64, n int, what string) ([]byte, error) {
	if n < 0 || n > maxBytes {
		return nil, &MemoryError{Addr: addr, Len: n, What: what, Err: fmt.Errorf("length out of range (at most %d)", maxBytes)}
	}
	b := make([]byte, n)
	if err := r.read(b, addr, what); err != nil {
		return nil, err
	}
	return b, nil
}

// maxBytes bounds one Bytes read: the longest thing HotSpot's readers
// take at once (a Symbol, a Java string's bytes) is far shorter.
const maxBytes = 1 << 16

// U8 reads a byte.
func (r *Reader) U8(addr uint64, what string) (uint8, error) {
	var b [1]byte
	err := r.read(b[:], addr, what)
	return b[0], err
}

// U16 reads a little-endian uint16.
func (r *Reader) U16(addr uint64, what string) (uint16, error) {
	var b [2]byte
	err := r.read(b[:], addr, what)
	return binary.LittleEndian.Uint16(b[:]), err
}

// U32 reads a little-endian uint32.
func (r *Reader) U32(addr uint64, what string) (uint32, error) {
	var b [4]byte
	err := r.read(b[:], addr, what)
	return binary.LittleEndian.Uint32(b[:]), err
}

// U64 reads a little-endian uint64 (a pointer, a size_t).
func (r *Reader) U64(addr uint64, what string) (uint64, error) {
	var b [8]byte
	err := r.read(b[:], addr, what)
	return binary.LittleEndian.Uint64(b[:]), err
}

// CString reads a NUL-terminated string of at most max bytes at addr.
func (r *Reader) CString(addr uint64, max int, what string) (string, error) {
	if addr == 0 {
		return "", &MemoryError{Addr: addr, Len: 1, What: what, Err: ErrNull}
	}
	if err := r.count(); err != nil {
		return "", &MemoryError{Addr: addr, Len: 1, What: what, Err: err}
	}
	var out []byte
	for len(out) < max {
		a := addr + uint64(len(out))
		base := a &^ (pageSize - 1)
		pg, err := r.page(base)
		off := int(a - base)
		if err == nil && off >= len(pg.b) {
			err = errors.New("address not readable")
		}
		if err != nil {
			return "", &MemoryError{Addr: addr, Len: len(out) + 1, What: what, Err: err}
		}
		chunk := pg.b[off:]
		if len(chunk) > max-len(out) {
			chunk = chunk[:max-len(out)]
		}
		for i, c := range chunk {
			if c == 0 {
				if r.used != nil {
					r.used(a, i+1)
				}
				return string(append(out, chunk[:i]...)), nil
			}
		}
		if r.used != nil {
			r.used(a, len(chunk))
		}
		out = append(out, chunk...)
	}
	return "", &MemoryError{Addr: addr, Len: max, What: what, Err: fmt.Errorf("no NUL in %d bytes", max)}
}
