package tap

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The sender filter hands each record to the tap through a BPF ring
// buffer (BPF_MAP_TYPE_RINGBUF) mapped into the daemon, read in place:
// naming a datagram's sender costs no system call. A hash map the tap
// asked with BPF_MAP_LOOKUP_ELEM cost one per heartbeat datagram, a fifth
// of an idle daemon's CPU with 50 tapped targets (BenchmarkDaemon's 500
// datagrams a second). The filter writes with BPF_RB_NO_WAKEUP: nothing
// waits on the ring, it is read when the tap reads its packets.
const (
	// sendRingBytes holds a record (40 bytes with its header) for each
	// datagram the packet ring holds (~25,000 small ones): a record the
	// ring has no room for is not written, and its datagram is named by
	// its socket instead.
	sendRingBytes = 1 << 20
	// sendRecordBytes is what the filter writes: senderValue, senderKey.
	sendRecordBytes = int(unsafe.Sizeof(senderValue{}) + unsafe.Sizeof(senderKey{}))
	// maxPendingSenders bounds the records kept (as the hash map's 65,536
	// entries did): past it the older generation is forgotten early.
	maxPendingSenders = 1 << 16
	// senderKeep is how long a record is kept at least, waiting for its
	// datagram to be read: the packet ring hands a block over within
	// ringRetire of its first datagram.
	senderKeep = time.Second
)

// Flags in a ring buffer record's length word (linux/bpf.h).
const (
	ringBusyBit    = unix.BPF_RINGBUF_BUSY_BIT
	ringDiscardBit = unix.BPF_RINGBUF_DISCARD_BIT
	ringHeaderLen  = unix.BPF_RINGBUF_HDR_SZ
)

// sendRing is the mapped ring buffer and the records read from it, kept
// in two generations: the current one, and the one before, dropped when
// the current one is senderKeep old (or full).
type sendRing struct {
	consumer []byte // one page: the consumer position, ours to write
	producer []byte // a page with the producer position, then the data twice
	data     []byte // the data, mapped twice over so a record never wraps
	mask     uint64

	cur, prev map[senderKey]uint32
	curSince  time.Time
}

// mapSendRing maps ring buffer map fd.
func mapSendRing(fd int) (*sendRing, error) {
	page := os.Getpagesize()
	consumer, err := unix.Mmap(fd, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the ring buffer's consumer page: %w", err)
	}
	producer, err := unix.Mmap(fd, int64(page), page+2*sendRingBytes, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Munmap(consumer)
		return nil, fmt.Errorf("mapping the ring buffer: %w", err)
	}
	return &sendRing{
		consumer: consumer, producer: producer, data: producer[page:], mask: sendRingBytes - 1,
		cur: map[senderKey]uint32{}, prev: map[senderKey]uint32{}, curSince: time.Now(),
	}, nil
}

func (r *sendRing) unmap() {
	if r.consumer != nil {
		_ = unix.Munmap(r.consumer)
		_ = unix.Munmap(r.producer)
		r.consumer, r.producer, r.data = nil, nil, nil
	}
}

func (r *sendRing) consumerPos() *uint64 { return (*uint64)(unsafe.Pointer(&r.consumer[0])) }
func (r *sendRing) producerPos() *uint64 { return (*uint64)(unsafe.Pointer(&r.producer[0])) }

// collect reads the records the filter wrote since the last call into
// the current generation. The kernel wrote them, but a length is still
// checked against the ring.
func (r *sendRing) collect() {
	if r.consumer == nil {
		return
	}
	cons := atomic.LoadUint64(r.consumerPos())
	prod := atomic.LoadUint64(r.producerPos())
	if cons == prod {
		return
	}
	r.age()
	for cons < prod {
		at := cons & r.mask
		word := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[at])))
		if word&ringBusyBit != 0 {
			break // being written: it and those after it wait for the next call
		}
		n := uint64(word &^ (ringBusyBit | ringDiscardBit))
		if n > r.mask+1-ringHeaderLen {
			break // not a record this ring can hold: read no further
		}
		if word&ringDiscardBit == 0 && n == uint64(sendRecordBytes) {
			r.keep(r.data[at+ringHeaderLen : at+ringHeaderLen+n])
		}
		cons += (ringHeaderLen + n + 7) &^ 7
	}
	atomic.StoreUint64(r.consumerPos(), cons)
}

// keep records one record: the sender's process, then the key.
func (r *sendRing) keep(rec []byte) {
	var k senderKey
	for i := range k {
		k[i] = binary.NativeEndian.Uint32(rec[8+4*i:])
	}
	if len(r.cur) >= maxPendingSenders {
		r.rotate()
	}
	r.cur[k] = binary.NativeEndian.Uint32(rec[0:])
}

// age starts a new generation when the current one is senderKeep old.
func (r *sendRing) age() {
	if time.Since(r.curSince) >= senderKeep {
		r.rotate()
	}
}

// rotate forgets the older generation; its map is reused, so that a
// steady flow of records allocates nothing.
func (r *sendRing) rotate() {
	clear(r.prev)
	r.prev, r.cur = r.cur, r.prev
	r.curSince = time.Now()
}

// sender is the process recorded under k, 0 when none is.
func (r *sendRing) sender(k senderKey) uint32 {
	if v, ok := r.cur[k]; ok {
		return v
	}
	return r.prev[k]
}
