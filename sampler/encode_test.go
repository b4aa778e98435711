package sampler

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Encoders of the kernel's record formats, for unit tests and fuzz seeds.

type enc struct{ b []byte }

func (e *enc) u64(v uint64) *enc { e.b = binary.LittleEndian.AppendUint64(e.b, v); return e }
func (e *enc) u32(v uint32) *enc { e.b = binary.LittleEndian.AppendUint32(e.b, v); return e }

// record finishes a record: header in front, sized.
func finish(typ uint32, misc uint16, body []byte) []byte {
	h := make([]byte, 8, 8+len(body))
	binary.LittleEndian.PutUint32(h, typ)
	binary.LittleEndian.PutUint16(h[4:], misc)
	binary.LittleEndian.PutUint16(h[6:], uint16(8+len(body)))
	return append(h, body...)
}

type trailer struct {
	pid, tid uint32
	time     uint64
	cpu      uint32
	id       uint64
}

func (e *enc) trailer(t trailer) *enc {
	return e.u32(t.pid).u32(t.tid).u64(t.time).u32(t.cpu).u32(0).u64(t.id)
}

type testSample struct {
	id, ip   uint64
	pid, tid uint32
	time     uint64
	cpu      uint32
	period   uint64
	chain    []uint64
	regs     []uint64 // nil: no REGS_USER; written with ABI 64
	stack    []byte   // nil: no STACK_USER
	dyn      uint64
}

func encodeSample(s testSample) []byte {
	e := &enc{}
	e.u64(s.id).u64(s.ip).u32(s.pid).u32(s.tid).u64(s.time).u32(s.cpu).u32(0).u64(s.period)
	e.u64(uint64(len(s.chain)))
	for _, v := range s.chain {
		e.u64(v)
	}
	if s.regs != nil {
		e.u64(unix.PERF_SAMPLE_REGS_ABI_64)
		for _, v := range s.regs {
			e.u64(v)
		}
	}
	if s.stack != nil {
		e.u64(uint64(len(s.stack)))
		e.b = append(e.b, s.stack...)
		if len(s.stack) > 0 {
			e.u64(s.dyn)
		}
	}
	return finish(recSample, 0, e.b)
}

func encodeSwitch(out, preempt bool, t trailer) []byte {
	var misc uint16
	if out {
		misc |= miscSwitchOut
	}
	if preempt {
		misc |= miscSwitchOutPreempt
	}
	return finish(recSwitch, misc, (&enc{}).trailer(t).b)
}

func encodeLost(id, lost uint64, t trailer) []byte {
	return finish(recLost, 0, (&enc{}).u64(id).u64(lost).trailer(t).b)
}

func encodeTask(typ uint32, pid, ppid, tid, ptid uint32, t trailer) []byte {
	return finish(typ, 0, (&enc{}).u32(pid).u32(ppid).u32(tid).u32(ptid).u64(t.time).trailer(t).b)
}

func encodeComm(pid, tid uint32, name string, t trailer) []byte {
	b := (&enc{}).u32(pid).u32(tid).b
	n := append([]byte(name), 0)
	for len(n)%8 != 0 {
		n = append(n, 0)
	}
	b = append(b, n...)
	return finish(recComm, 0, (&enc{b: b}).trailer(t).b)
}

// fakeRing is a ring mapping in ordinary memory that a test writes into
// as the kernel would.
type fakeRing struct {
	mem  []byte
	page int
	head uint64
	r    *ring
}

func newFakeRing(page, dataSize int) *fakeRing {
	words := make([]uint64, (page+dataSize)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), page+dataSize)
	binary.LittleEndian.PutUint64(mem[offDataOffset:], uint64(page))
	binary.LittleEndian.PutUint64(mem[offDataSize:], uint64(dataSize))
	r, err := newRing(mem, page)
	if err != nil {
		panic(err)
	}
	return &fakeRing{mem: mem, page: page, r: r}
}

// write appends a record at head, wrapping around the data area, and
// publishes the new head.
func (f *fakeRing) write(rec []byte) {
	data := f.mem[f.page:]
	for i, b := range rec {
		data[(f.head+uint64(i))%uint64(len(data))] = b
	}
	f.head += uint64(len(rec))
	binary.LittleEndian.PutUint64(f.mem[offDataHead:], f.head)
}
