package sampler

import (
	"bytes"
	"testing"
)

func TestRingReadsAndReleases(t *testing.T) {
	const page, size = 4096, 256
	recs := [][]byte{
		encodeSwitch(true, false, trailer{time: 1}),
		encodeLost(1, 5, trailer{time: 2}),
		encodeComm(1, 1, "a-long-thread-name", trailer{time: 3}),
	}
	cases := []struct {
		name  string
		start uint64 // where head and tail begin, to place the wrap
	}{
		{"no wrap", 0},
		{"record straddles the end", size - 24},
		{"header in the last 8 bytes", size - 8},
		{"wrap exactly at a record boundary", size - uint64(len(recs[0]))},
		{"after many laps", 1000*size + 40},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeRing(page, size)
			f.head = c.start
			f.write(nil)
			*f.r.tail = c.start
			for _, r := range recs {
				f.write(r)
			}
			var got [][]byte
			n := f.r.read(func(b []byte) { got = append(got, append([]byte(nil), b...)) })
			if n != len(recs) {
				t.Fatalf("read %d records, want %d", n, len(recs))
			}
			for i := range recs {
				if !bytes.Equal(got[i], recs[i]) {
					t.Errorf("record %d: got %x\nwant %x", i, got[i], recs[i])
				}
			}
			if *f.r.tail != f.head || f.r.pending() != 0 {
				t.Errorf("tail %d, head %d: not released", *f.r.tail, f.head)
			}
			if f.r.corrupt != 0 {
				t.Errorf("corrupt %d", f.r.corrupt)
			}
		})
	}
}

func TestRingSkipsGarbage(t *testing.T) {
	f := newFakeRing(4096, 256)
	f.write(encodeSwitch(true, false, trailer{}))
	f.write(make([]byte, 16)) // a "record" of size 0
	f.write(encodeSwitch(false, false, trailer{}))
	n := f.r.read(func([]byte) {})
	if n != 1 || f.r.corrupt != 1 {
		t.Errorf("read %d, corrupt %d; want 1 and 1", n, f.r.corrupt)
	}
	if f.r.pending() != 0 {
		t.Errorf("%d bytes left after garbage: the reader must resynchronise at head", f.r.pending())
	}
	// A record claiming more than was written.
	rec := encodeSwitch(true, false, trailer{})
	rec[6] = 200
	f.write(rec)
	if n := f.r.read(func([]byte) {}); n != 0 || f.r.corrupt != 2 {
		t.Errorf("oversized record: read %d, corrupt %d", n, f.r.corrupt)
	}
}

func TestNewRingRejectsBadGeometry(t *testing.T) {
	f := newFakeRing(4096, 256)
	f.mem[offDataSize] = 100 // not a power of two
	if _, err := newRing(f.mem, 4096); err == nil {
		t.Error("data size 100 accepted")
	}
	if _, err := newRing(make([]byte, 4096), 4096); err == nil {
		t.Error("mapping without data pages accepted")
	}
}
