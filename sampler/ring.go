package sampler

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Offsets in struct perf_event_mmap_page (linux/perf_event.h): the control
// page in front of the data pages.
const (
	offDataHead   = 1024
	offDataTail   = 1032
	offDataOffset = 1040
	offDataSize   = 1048
)

// ring reads one perf ring buffer: the kernel writes records at data_head,
// we consume at data_tail. The kernel never overwrites data we have not
// released (the mapping is writable, so it honours data_tail), and records
// that do not fit are counted by a PERF_RECORD_LOST once room returns.
type ring struct {
	mem     []byte // the whole mapping: control page, then data
	data    []byte // the power-of-two data area
	head    *uint64
	tail    *uint64
	scratch []byte // a record that straddles the end of data, made whole
	corrupt uint64 // times the ring held something that was not a record
}

// newRing wraps a mapping of 1 + 2^n pages. It works on any byte slice laid
// out like the kernel's, which is how tests drive it.
func newRing(mem []byte, pageSize int) (*ring, error) {
	if len(mem) < pageSize+headerSize || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, fmt.Errorf("perf ring of %d bytes: too small or misaligned", len(mem))
	}
	r := &ring{
		mem:  mem,
		head: (*uint64)(unsafe.Pointer(&mem[offDataHead])),
		tail: (*uint64)(unsafe.Pointer(&mem[offDataTail])),
	}
	off := binary.LittleEndian.Uint64(mem[offDataOffset:])
	size := binary.LittleEndian.Uint64(mem[offDataSize:])
	if off == 0 || size == 0 { // kernels before 4.1 leave these zero
		off, size = uint64(pageSize), uint64(len(mem)-pageSize)
	}
	if off > uint64(len(mem)) || size > uint64(len(mem))-off || size&(size-1) != 0 || size < 8 {
		return nil, fmt.Errorf("perf ring of %d bytes: data at %d size %d is not a power-of-two area inside it", len(mem), off, size)
	}
	r.data = mem[off : off+size]
	return r, nil
}

// pending is how many bytes the kernel has written that we have not read.
func (r *ring) pending() uint64 {
	return atomic.LoadUint64(r.head) - atomic.LoadUint64(r.tail)
}

// read hands every complete record to fn, then releases them to the
// kernel. A record passed to fn is only valid during the call. It returns
// the number of records read.
func (r *ring) read(fn func(rec []byte)) int {
	head := atomic.LoadUint64(r.head) // acquire: the data before head is written
	tail := atomic.LoadUint64(r.tail)
	size := uint64(len(r.data))
	mask := size - 1
	n := 0
	for tail < head {
		avail := head - tail
		off := tail & mask
		if avail < headerSize || avail > size {
			r.corrupt++
			tail = head
			break
		}
		// The kernel keeps records 8-byte aligned, so a header never
		// straddles the end; read its size byte by byte all the same.
		recSize := uint64(r.data[(off+6)&mask]) | uint64(r.data[(off+7)&mask])<<8
		if recSize < headerSize || recSize > avail {
			r.corrupt++
			tail = head
			break
		}
		var rec []byte
		if off+recSize <= size {
			rec = r.data[off : off+recSize]
		} else {
			first := size - off
			r.scratch = append(r.scratch[:0], r.data[off:]...)
			r.scratch = append(r.scratch, r.data[:recSize-first]...)
			rec = r.scratch
		}
		fn(rec)
		tail += recSize
		n++
	}
	atomic.StoreUint64(r.tail, tail) // release: the kernel may now reuse it
	return n
}
