package v8

import (
	"encoding/binary"
	"testing"
	"unicode/utf8"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// fuzzHeader is the part of a fuzz input before the heap: the frame
// pointer's and the pc's offsets into it, and what code the pc is in and
// whether it is a return address.
const fuzzHeader = 9

// fuzzInput is a frame of a fake heap as FuzzFrame reads it.
func fuzzInput(f *fakeHeap, at At) []byte {
	b := make([]byte, fuzzHeader, fuzzHeader+len(f.mem))
	binary.LittleEndian.PutUint32(b, uint32(at.FP-f.base))
	binary.LittleEndian.PutUint32(b[4:], uint32(at.PC-f.base))
	b[8] = byte(at.Code)
	if at.Return {
		b[8] |= 4
	}
	return append(b, f.mem...)
}

// FuzzFrame reads a frame of a heap made of the input: garbage, cycles
// and structures cut short must give an error or a frame, within the
// reads and the allocations a question is allowed, never a panic.
func FuzzFrame(f *testing.F) {
	l := testLayout(f)
	for _, seed := range fuzzSeeds(l) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < fuzzHeader {
			return
		}
		heap := &fakeHeap{base: fakeBase, mem: data[fuzzHeader:], l: l}
		at := At{
			FP:     fakeBase + uint64(binary.LittleEndian.Uint32(data)),
			PC:     fakeBase + uint64(binary.LittleEndian.Uint32(data[4:])),
			Code:   Code(data[8] & 3),
			Return: data[8]&4 != 0,
		}
		mem := &countingMemory{Memory: heap}
		r := NewReader(l, mem)
		var fr Frame
		var err error
		// A question reads at most maxReadBytes; what it keeps is a
		// fraction of that.
		if n := testutil.HeapBytes(func() { fr, err = r.Frame(at) }); n > 2*maxReadBytes {
			t.Fatalf("a frame allocated %d bytes", n)
		}
		if mem.reads > maxReads || mem.bytes > maxReadBytes {
			t.Fatalf("%d reads of %d bytes: bound %d, %d", mem.reads, mem.bytes, maxReads, maxReadBytes)
		}
		if err != nil {
			if fr.Kind != 0 || len(fr.Functions) > 0 {
				t.Fatalf("a frame %+v with the error %v", fr, err)
			}
			return
		}
		if fr.Kind == Typed && len(fr.Functions) > 0 || fr.Kind != Typed && len(fr.Functions) == 0 {
			t.Fatalf("frame %+v", fr)
		}
		if len(fr.Functions) > maxInlined+1 {
			t.Fatalf("%d functions in one frame", len(fr.Functions))
		}
		for _, fn := range fr.Functions {
			if len(fn.Name) > maxNameBytes || len(fn.Script) > maxNameBytes || !utf8.ValidString(fn.Name) || !utf8.ValidString(fn.Script) {
				t.Fatalf("function %q of script %q", fn.Name, fn.Script)
			}
			if fn.Line < 0 || fn.Column < 0 || (fn.Line == 0) != (fn.Column == 0) {
				t.Fatalf("line %d column %d", fn.Line, fn.Column)
			}
		}
	})
}

// fuzzSeeds are frames of the kinds the reader reads, and the garbage
// around them: a frame whose name is a cons string of itself, one whose
// strings claim more characters than the heap holds.
func fuzzSeeds(l *Layout) [][]byte {
	var seeds [][]byte
	f := newFakeHeap(l)
	src := "function spin() {\n  for (;;) work();\n}\n"
	seeds = append(seeds, fuzzInput(f, At{FP: interpretedFrame(f, "spin", src, 20, true), Return: true}))

	o, fp, start := optimizedHeap(l, false)
	seeds = append(seeds, fuzzInput(o, At{FP: fp, PC: start + 0x31, Return: true, Code: CodeJIT}))

	c := newFakeHeap(l)
	self := c.cons(0, 0, 10)
	selfObj, _ := l.object(self)
	c.put64(selfObj+16, self)
	fn, _ := c.function(2066, c.sfi(self, c.script(self, self, nil, 0)))
	seeds = append(seeds, fuzzInput(c, At{FP: c.frame(c.context(), fn, 0, 0), Code: CodeBuiltins}))

	s := newFakeHeap(l)
	long := s.str("abc")
	longObj, _ := l.object(long)
	s.put32(longObj+12, 1<<28)
	fn, _ = s.function(2066, s.sfi(long, s.script(long, long, nil, 0)))
	seeds = append(seeds, fuzzInput(s, At{FP: s.frame(s.context(), fn, 0, 0), Code: CodeBuiltins}))

	t := newFakeHeap(l)
	seeds = append(seeds, fuzzInput(t, At{FP: t.frame(3<<1, 0, 0, 0)}))
	return seeds
}
