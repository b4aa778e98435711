package tap

import (
	"encoding/binary"
	"testing"
	"time"
)

// fakeRing is a sendRing over memory the test writes as the kernel
// would: the data twice over (the kernel maps its pages twice), records
// with their header at the producer position.
type fakeRing struct {
	r    *sendRing
	size uint64
	prod uint64
}

func newFakeRing(size int) *fakeRing {
	r := &sendRing{
		consumer: make([]byte, 8), producer: make([]byte, 8+2*size), mask: uint64(size - 1),
		cur: map[senderKey]uint32{}, prev: map[senderKey]uint32{}, curSince: time.Now(),
	}
	r.data = r.producer[8:]
	return &fakeRing{r: r, size: uint64(size)}
}

// write appends a record of body with the length word's flags, and
// returns where its header is.
func (f *fakeRing) write(body []byte, flags uint32) uint64 {
	at := f.prod
	var hdr [ringHeaderLen]byte
	binary.NativeEndian.PutUint32(hdr[:], uint32(len(body))|flags)
	f.put(at, hdr[:])
	f.put(at+ringHeaderLen, body)
	f.prod += (ringHeaderLen + uint64(len(body)) + 7) &^ 7
	binary.NativeEndian.PutUint64(f.r.producer, f.prod)
	return at
}

func (f *fakeRing) put(pos uint64, b []byte) {
	for i, c := range b {
		p := (pos + uint64(i)) & f.r.mask
		f.r.data[p], f.r.data[p+f.size] = c, c
	}
}

// clearBusy finishes the record whose header is at pos.
func (f *fakeRing) clearBusy(pos uint64, n int) {
	var hdr [4]byte
	binary.NativeEndian.PutUint32(hdr[:], uint32(n))
	f.put(pos, hdr[:])
}

func record(tgid uint32, k senderKey) []byte {
	b := make([]byte, sendRecordBytes)
	binary.NativeEndian.PutUint32(b, tgid)
	for i, w := range k {
		binary.NativeEndian.PutUint32(b[8+4*i:], w)
	}
	return b
}

func keyN(n uint32) senderKey { return senderKey{4 | 20<<16, 8125 | n<<16, 0x7f000001} }

// TestSendRingCollect: the tap names a datagram's sender from the
// records the filter wrote before it, whatever else the ring holds: a
// record the kernel discarded is skipped, one still being written is
// waited for (neither it nor those after it are read yet), one across the
// ring's end is read whole, and a length no record has stops the reading
// without harm.
func TestSendRingCollect(t *testing.T) {
	tests := []struct {
		name  string
		write func(f *fakeRing)
		want  map[uint32]uint32 // key number → sender; 0: none
	}{
		{"records", func(f *fakeRing) {
			f.write(record(100, keyN(1)), 0)
			f.write(record(200, keyN(2)), 0)
		}, map[uint32]uint32{1: 100, 2: 200}},
		{"the later of two under one key", func(f *fakeRing) {
			f.write(record(100, keyN(1)), 0)
			f.write(record(300, keyN(1)), 0)
		}, map[uint32]uint32{1: 300}},
		{"discarded", func(f *fakeRing) {
			f.write(record(100, keyN(1)), ringDiscardBit)
			f.write(record(200, keyN(2)), 0)
		}, map[uint32]uint32{1: 0, 2: 200}},
		{"being written", func(f *fakeRing) {
			f.write(record(100, keyN(1)), ringBusyBit)
			f.write(record(200, keyN(2)), 0)
		}, map[uint32]uint32{1: 0, 2: 0}},
		{"another size", func(f *fakeRing) {
			f.write(make([]byte, 12), 0)
			f.write(record(200, keyN(2)), 0)
		}, map[uint32]uint32{2: 200}},
		{"across the end", func(f *fakeRing) {
			f.prod = f.size - 16
			binary.NativeEndian.PutUint64(f.r.consumer, f.prod)
			f.write(record(100, keyN(1)), 0)
		}, map[uint32]uint32{1: 100}},
		{"a length past the ring", func(f *fakeRing) {
			f.write(record(100, keyN(1)), 0)
			at := f.write(record(200, keyN(2)), 0)
			var hdr [4]byte
			binary.NativeEndian.PutUint32(hdr[:], uint32(f.size))
			f.put(at, hdr[:])
		}, map[uint32]uint32{1: 100, 2: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeRing(4096)
			tt.write(f)
			f.r.collect()
			for n, want := range tt.want {
				if got := f.r.sender(keyN(n)); got != want {
					t.Errorf("key %d: sender %d, want %d", n, got, want)
				}
			}
		})
	}
}

// TestSendRingBusyThenDone: a record being written when the ring is read
// is read at the next reading, once the kernel has finished it, and the
// consumer position tells the kernel the room is free.
func TestSendRingBusyThenDone(t *testing.T) {
	f := newFakeRing(4096)
	at := f.write(record(100, keyN(1)), ringBusyBit)
	f.r.collect()
	if got := f.r.sender(keyN(1)); got != 0 {
		t.Fatalf("a record being written was read: sender %d", got)
	}
	if c := binary.NativeEndian.Uint64(f.r.consumer); c != 0 {
		t.Fatalf("consumer position %d past a record being written", c)
	}
	f.clearBusy(at, sendRecordBytes)
	f.r.collect()
	if got := f.r.sender(keyN(1)); got != 100 {
		t.Fatalf("sender %d, want 100", got)
	}
	if c := binary.NativeEndian.Uint64(f.r.consumer); c != f.prod {
		t.Fatalf("consumer position %d, want %d", c, f.prod)
	}
}

// TestSendRingKeeps: a record is kept at least senderKeep (its datagram
// may be read a block later) and forgotten after, and the records kept
// stay bounded however many come.
func TestSendRingKeeps(t *testing.T) {
	f := newFakeRing(1 << 16)
	f.write(record(100, keyN(1)), 0)
	f.r.collect()
	f.r.curSince = time.Now().Add(-senderKeep) // the generation ages
	f.write(record(200, keyN(2)), 0)
	f.r.collect()
	if got := f.r.sender(keyN(1)); got != 100 {
		t.Errorf("a record one generation old is forgotten: sender %d", got)
	}
	f.r.curSince = time.Now().Add(-senderKeep)
	f.write(record(300, keyN(3)), 0)
	f.r.collect()
	if got := f.r.sender(keyN(1)); got != 0 {
		t.Errorf("a record two generations old is kept: sender %d", got)
	}
	if got := f.r.sender(keyN(2)); got != 200 {
		t.Errorf("the last generation's record is forgotten: sender %d", got)
	}
	for n := range uint32(3 * maxPendingSenders) {
		f.r.keep(record(n+1, senderKey{n}))
	}
	if n := len(f.r.cur) + len(f.r.prev); n > 2*maxPendingSenders {
		t.Errorf("%d records kept, more than %d", n, 2*maxPendingSenders)
	}
}
