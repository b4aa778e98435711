package jit

import (
	"encoding/binary"
	"errors"
	"testing"
)

// sliceMemory is a process's memory made of one byte slice at base.
type sliceMemory struct {
	base uint64
	b    []byte
}

func (m sliceMemory) ReadAt(p []byte, addr uint64) (int, error) {
	if addr < m.base || addr-m.base >= uint64(len(m.b)) {
		return 0, errors.New("unmapped")
	}
	n := copy(p, m.b[addr-m.base:])
	if n < len(p) {
		return n, errors.New("short")
	}
	return n, nil
}

// gdbMemory lays out a descriptor and its entries the way a JIT does: the
// descriptor at base, then each entry and the object it names.
func gdbMemory(base uint64, objects [][]byte) sliceMemory {
	mem := make([]byte, 24)
	binary.LittleEndian.PutUint32(mem, gdbVersion)
	var prev uint64
	for i, obj := range objects {
		at := base + uint64(len(mem))
		e := make([]byte, 32)
		binary.LittleEndian.PutUint64(e[8:], prev)
		binary.LittleEndian.PutUint64(e[16:], at+32)
		binary.LittleEndian.PutUint64(e[24:], uint64(len(obj)))
		if i == 0 {
			binary.LittleEndian.PutUint64(mem[16:], at)
		} else {
			binary.LittleEndian.PutUint64(mem[prev-base:], at) // the previous entry's next
		}
		mem = append(append(mem, e...), obj...)
		prev = at
	}
	return sliceMemory{base, mem}
}

func TestReadGDBList(t *testing.T) {
	const base = 0x10000
	mem := gdbMemory(base, [][]byte{[]byte("one"), []byte("second")})
	entries, err := readGDBList(mem, base)
	if err != nil || len(entries) != 2 || entries[0].size != 3 || entries[1].size != 6 {
		t.Fatalf("entries %+v, %v", entries, err)
	}
	// A list that loops back: read once, and said.
	binary.LittleEndian.PutUint64(mem.b[entries[1].addr-32-base:], entries[0].addr-32)
	if entries, err := readGDBList(mem, base); err == nil || len(entries) != 2 {
		t.Errorf("a looping list: %+v, %v", entries, err)
	}
	binary.LittleEndian.PutUint32(mem.b, 2)
	if _, err := readGDBList(mem, base); !errors.Is(err, ErrGDBVersion) {
		t.Errorf("version 2: %v", err)
	}
}

// FuzzGDBJIT: whatever the target's memory holds where its descriptor
// says, the list is walked within its bounds, every object is read
// within its own, and the index stays within its limits.
func FuzzGDBJIT(f *testing.F) {
	f.Add(gdbMemory(0x1000, [][]byte{[]byte("\x7fELF\x02\x01\x01")}).b)
	f.Add(gdbMemory(0x1000, nil).b)
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := sliceMemory{0x1000, data}
		entries, _ := readGDBList(mem, 0x1000)
		if len(entries) > maxGDBEntries {
			t.Fatalf("%d entries, bound %d", len(entries), maxGDBEntries)
		}
		g := newGDBSource(mem, 0x1000)
		g.maxRead = 1 << 20
		b := &builder{}
		// Objects may overlap: what one read holds is bounded by
		// maxRead (twice, as an object's bytes grow), not by the input.
		heapBound(t, "GDB JIT objects", len(data), 512, 2*uint64(g.maxRead)+8<<20, func() { _ = g.ingest(b) })
		if g.info.Bytes > g.maxRead {
			t.Fatalf("%d bytes of objects read at once, bound %d", g.info.Bytes, g.maxRead)
		}
		checkIndex(t, b.index())
	})
}
