package cpython

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The tests of what garbage does (and the fuzz targets) read memory
// images laid out by fakeBuilder as one CPython version would lay out a
// runtime, an interpreter, its thread states, frames, code objects and
// strings: the edge cases real interpreters do not produce (cycles,
// torn pointers, lying sizes) are made by changing a word of one.

// fakeBase is where a fake image starts: an address of user space.
const fakeBase = 0x7f1200000000

// fakeMem is memory made of one image at fakeBase; it counts reads.
type fakeMem struct {
	b     []byte
	reads int
}

var errFakeUnmapped = errors.New("fake: not mapped")

func (m *fakeMem) ReadAt(p []byte, addr uint64) (int, error) {
	m.reads++
	if addr < fakeBase || addr-fakeBase > uint64(len(m.b)) {
		return 0, errFakeUnmapped
	}
	n := copy(p, m.b[addr-fakeBase:])
	if n < len(p) {
		return n, errFakeUnmapped
	}
	return n, nil
}

// fakeBuilder lays out structures of one version in an image.
type fakeBuilder struct {
	l     *Layout
	minor int
	b     []byte
	types typeAddrs
	none  uint64
}

func newFakeBuilder(minor int) *fakeBuilder {
	f := &fakeBuilder{l: layouts[minor], minor: minor}
	for _, name := range []string{"code", "str", "bytes", "frame"} {
		tn := f.alloc(16)
		copy(f.at(tn, 16), name)
		tp := f.alloc(offTypeName + 8)
		f.put64(tp+offTypeName, tn)
		switch name {
		case "code":
			f.types.code = tp
		case "str":
			f.types.unicode = tp
		case "bytes":
			f.types.bytes = tp
		case "frame":
			f.types.frame = tp
		}
	}
	f.none = f.alloc(16)
	return f
}

// alloc returns the address of n new zero bytes, 16-aligned.
func (f *fakeBuilder) alloc(n int) uint64 {
	for len(f.b)%16 != 0 {
		f.b = append(f.b, 0)
	}
	addr := fakeBase + uint64(len(f.b))
	f.b = append(f.b, make([]byte, n)...)
	return addr
}

func (f *fakeBuilder) at(addr uint64, n int) []byte {
	return f.b[addr-fakeBase : addr-fakeBase+uint64(n)]
}

func (f *fakeBuilder) put64(addr, v uint64) { binary.LittleEndian.PutUint64(f.at(addr, 8), v) }
func (f *fakeBuilder) put32(addr uint64, v uint32) {
	binary.LittleEndian.PutUint32(f.at(addr, 4), v)
}
func (f *fakeBuilder) put8(addr uint64, v uint8) { f.at(addr, 1)[0] = v }

// field writes v at offset off of a structure, unless the version lacks
// the field (off -1).
func (f *fakeBuilder) field(base uint64, off int64, v uint64) {
	if off >= 0 {
		f.put64(base+uint64(off), v)
	}
}

// str lays out a compact str (ASCII, or latin-1/UCS-2/UCS-4 as its
// characters need).
func (f *fakeBuilder) str(s string) uint64 {
	l := f.l
	rs := []rune(s)
	kind := 1
	for _, r := range rs {
		switch {
		case r > 0xffff:
			kind = 4
		case r > 0xff && kind < 2:
			kind = 2
		}
	}
	ascii := kind == 1
	for _, r := range rs {
		if r >= 0x80 {
			ascii = false
		}
	}
	hdr := l.UnicodeCompactSize
	if ascii {
		hdr = l.UnicodeASCIISize
	}
	a := f.alloc(int(hdr) + (len(rs)+1)*kind)
	f.put64(a+offObType, f.types.unicode)
	f.put64(a+uint64(l.UnicodeLength), uint64(len(rs)))
	state := uint32(kind)<<l.KindShift | 1<<l.CompactBit
	if ascii {
		state |= 1 << l.ASCIIBit
	}
	if l.ReadyBit >= 0 {
		state |= 1 << l.ReadyBit
	}
	f.put32(a+uint64(l.UnicodeState), state)
	for i, r := range rs {
		p := a + uint64(hdr) + uint64(i*kind)
		switch kind {
		case 1:
			f.put8(p, uint8(r))
		case 2:
			binary.LittleEndian.PutUint16(f.at(p, 2), uint16(r))
		case 4:
			f.put32(p, uint32(r))
		}
	}
	return a
}

func (f *fakeBuilder) bytesObj(data []byte) uint64 {
	a := f.alloc(offBytesVal + len(data) + 1)
	f.put64(a+offObType, f.types.bytes)
	f.put64(a+offObSize, uint64(len(data)))
	copy(f.at(a+offBytesVal, len(data)), data)
	return a
}

// fakeUnits is the number of instructions (code units) of a fake code
// object.
const fakeUnits = 8

// lineTable is a table of the version's format under which every
// instruction of a fakeUnits-long code object is on line first+delta.
func (f *fakeBuilder) lineTable(delta int) []byte {
	switch f.l.LineTable {
	case LineTableLnotab:
		return []byte{0, byte(int8(delta))}
	case LineTable310:
		return []byte{fakeUnits * codeUnitBytes, byte(int8(delta))}
	}
	// One entry "no columns" (13) for all the units, line delta as an
	// svarint (one chunk: |delta| < 32).
	v := uint8(delta) << 1
	if delta < 0 {
		v = uint8(-delta)<<1 | 1
	}
	return []byte{0x80 | locNoColumns<<3 | (fakeUnits - 1), v}
}

// code lays out a code object whose instructions are all on line
// first+delta.
func (f *fakeBuilder) code(name, file string, first, delta int) uint64 {
	l := f.l
	a := f.alloc(int(l.CodeSize) + fakeUnits*codeUnitBytes)
	f.put64(a+offObType, f.types.code)
	if l.CodeAdaptive >= 0 {
		f.put64(a+offObSize, fakeUnits)
	}
	n := f.str(name)
	f.field(a, l.CodeName, n)
	f.field(a, l.CodeQualname, n)
	f.field(a, l.CodeFilename, f.str(file))
	f.put32(a+uint64(l.CodeFirstLine), uint32(first))
	f.field(a, l.CodeLineTable, f.bytesObj(f.lineTable(delta)))
	return a
}

// fakeFrame is one frame to lay out: its code, the code unit it is at,
// and (3.11+) whether an evaluation call begins with it.
type fakeFrame struct {
	code  uint64
	unit  int
	entry bool
}

// frames lays out a chain of frames, innermost first, and returns the
// innermost's address (what the thread state points to, but for 3.11
// and 3.12's _PyCFrame).
func (f *fakeBuilder) frames(fs []fakeFrame) uint64 {
	l := f.l
	var next uint64 // the frame laid out last, outer to the one being laid out
	for i := len(fs) - 1; i >= 0; i-- {
		fr := fs[i]
		if fr.entry && l.OwnedByCStack >= 0 {
			shim := f.alloc(int(l.FrameSize))
			f.put8(shim+uint64(l.FrameOwner), uint8(l.OwnedByCStack))
			f.field(shim, l.FrameBack, next)
			f.field(shim, l.FrameCode, f.none)
			next = shim
		}
		a := f.alloc(int(l.FrameSize))
		f.field(a, l.FrameBack, next)
		f.field(a, l.FrameCode, fr.code)
		if l.FrameInstr >= 0 {
			f.field(a, l.FrameInstr, fr.code+uint64(l.CodeAdaptive)+uint64(fr.unit*codeUnitBytes))
			if fr.entry && l.FrameIsEntry >= 0 {
				f.put8(a+uint64(l.FrameIsEntry), 1)
			}
		} else {
			f.put64(a+offObType, f.types.frame)
			lasti := fr.unit * codeUnitBytes
			if l.LineTable == LineTable310 {
				lasti = fr.unit
			}
			f.put32(a+uint64(l.FrameLasti), uint32(lasti))
		}
		next = a
	}
	return next
}

// fakeThread is one thread state to lay out.
type fakeThread struct {
	tid    int
	frames []fakeFrame
}

// runtime lays out _PyRuntime with one interpreter holding threads (the
// first in the list holds the GIL) and returns its address and the
// thread states' addresses.
func (f *fakeBuilder) runtime(threads []fakeThread) (uint64, []uint64) {
	l := f.l
	rt := f.alloc(int(max(fieldsEnd(l.RuntimeInterpretersHead, l.RuntimeTstateCurrent), l.RuntimeGIL+l.GILMutex+l.GILMutexSize)))
	in := f.alloc(int(fieldsEnd(l.InterpNext, l.InterpThreadsHead, l.InterpID, l.InterpGIL)))
	f.put64(rt+uint64(l.RuntimeInterpretersHead), in)
	gil := rt + uint64(l.RuntimeGIL)
	if l.InterpGIL >= 0 {
		gil = f.alloc(int(l.GILMutex + l.GILMutexSize))
		f.put64(in+uint64(l.InterpGIL), gil)
	}
	var states []uint64
	var prev uint64
	for _, t := range threads {
		ts := f.alloc(int(fieldsEnd(l.ThreadNext, l.ThreadInterp, l.ThreadFrame, l.ThreadID, l.ThreadNativeID)))
		f.put64(ts+uint64(l.ThreadInterp), in)
		pthread := f.alloc(1024)
		f.put64(ts+uint64(l.ThreadID), pthread)
		f.put32(pthread+720, uint32(t.tid))
		f.field(ts, l.ThreadNativeID, uint64(t.tid))
		fr := f.frames(t.frames)
		if l.CFrameCurrentFrame >= 0 {
			cf := f.alloc(16)
			f.put64(cf+uint64(l.CFrameCurrentFrame), fr)
			fr = cf
		}
		f.put64(ts+uint64(l.ThreadFrame), fr)
		if prev == 0 {
			f.put64(in+uint64(l.InterpThreadsHead), ts)
		} else {
			f.put64(prev+uint64(l.ThreadNext), ts)
		}
		prev = ts
		states = append(states, ts)
	}
	if len(states) > 0 {
		f.put32(gil+uint64(l.GILLocked), 1)
		f.put64(gil+uint64(l.GILLastHolder), states[0])
	}
	return rt, states
}

// open makes a Runtime over the image as Open would over a target.
func (f *fakeBuilder) open(rtAddr uint64, opts Options) (*Runtime, *fakeMem) {
	// Memory is mapped by whole pages.
	for len(f.b)%pageSize != 0 {
		f.b = append(f.b, 0)
	}
	mem := &fakeMem{b: f.b}
	rt := newRuntime(mem, opts)
	rt.version = Version{3, f.minor, 0}
	rt.l = f.l
	rt.codeBuf = make([]byte, 0, f.l.CodeSize)
	rt.addr = rtAddr
	rt.types = f.types
	rt.none = f.none
	rt.tidOffset = 720
	return rt, mem
}

// minors are the versions read, oldest first.
var minors = []int{8, 9, 10, 11, 12, 13}

// standardImage is a runtime of version minor with two threads: one three
// frames deep (the middle one its own evaluation call's entry, as a
// Python function called from C is), one with no frame.
func standardImage(minor int) (*fakeBuilder, uint64, []uint64) {
	f := newFakeBuilder(minor)
	leaf := f.code("leaf", "/srv/app.py", 10, 2)
	mid := f.code("Handler.handle", "/srv/app.py", 20, 1)
	top := f.code("<module>", "/srv/main.py", 1, 4)
	rt, states := f.runtime([]fakeThread{
		{tid: 4242, frames: []fakeFrame{{code: leaf, unit: 3}, {code: mid, unit: 1, entry: true}, {code: top, unit: 5, entry: true}}},
		{tid: 4243},
	})
	return f, rt, states
}

func describe(fs []Frame) string {
	s := ""
	for _, f := range fs {
		s += fmt.Sprintf("%s %s:%d entry=%v; ", f.Function, f.File, f.Line, f.Entry)
	}
	return s
}
