package sampler

import (
	"testing"
)

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder as one
// record: it must not panic or read past the record, whatever the sizes
// inside say.
func FuzzDecodeRecord(f *testing.F) {
	tr := trailer{pid: 1, tid: 2, time: 3, cpu: 1, id: 2}
	f.Add(encodeSample(testSample{id: 1, chain: []uint64{contextKernel, 1, contextUser, 2}}))
	f.Add(encodeSample(testSample{id: 2, regs: []uint64{1, 2, 3}, stack: make([]byte, 32), dyn: 8}))
	f.Add(encodeSwitch(true, true, tr))
	f.Add(encodeLost(1, 9, tr))
	f.Add(encodeComm(1, 2, "name", tr))
	f.Add(encodeTask(recFork, 1, 1, 3, 2, tr))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b, lookupLayout)
		if err != nil {
			return
		}
		// A record that decodes is sliced, never copied (the ring's
		// reader decodes thousands a second); only a thread's new name
		// is kept as a string.
		allowed := 0.0
		if r.typ == recComm {
			allowed = 1
		}
		if n := testing.AllocsPerRun(10, func() { decodeRecord(b, lookupLayout) }); n > allowed {
			t.Fatalf("decoding a %d-byte record of type %d allocated %v times", len(b), r.typ, n)
		}
		stack, k := callchain(r.chain, nil)
		if k > len(stack) || len(stack) > len(b)/8 {
			t.Fatalf("stack of %d (kernel %d) from %d bytes", len(stack), k, len(b))
		}
		if len(r.stackDump) > len(b) || len(r.regs) > len(b) {
			t.Fatal("slices larger than the record")
		}
	})
}

// FuzzRing writes arbitrary bytes into a ring as if the kernel had, and
// reads them back as records: the reader must stop at head, resynchronise
// on garbage, and never hand out a record longer than what was written.
func FuzzRing(f *testing.F) {
	var seed []byte
	seed = append(seed, encodeSwitch(true, false, trailer{})...)
	seed = append(seed, encodeLost(1, 5, trailer{})...)
	f.Add(seed, uint16(200))
	f.Add(encodeComm(1, 1, "x", trailer{}), uint16(250))
	f.Fuzz(func(t *testing.T, data []byte, start uint16) {
		const size = 256
		if len(data) > size {
			data = data[:size]
		}
		fr := newFakeRing(4096, size)
		fr.head = uint64(start)
		fr.write(nil)
		*fr.r.tail = uint64(start)
		fr.write(data)
		total := 0
		fr.r.read(func(rec []byte) {
			total += len(rec)
			if total > len(data) {
				t.Fatalf("read %d bytes of records from %d written", total, len(data))
			}
			_, _ = decodeRecord(rec, lookupLayout)
		})
		if fr.r.pending() != 0 {
			t.Fatalf("%d bytes left unread", fr.r.pending())
		}
	})
}
