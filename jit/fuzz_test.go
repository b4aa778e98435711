package jit

import (
	"bytes"
	"slices"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// heapBound fails t if f allocated more than perByte bytes per input byte
// plus fixed: a reader that believes a size read from its input would.
func heapBound(t *testing.T, what string, input int, perByte, fixed uint64, f func()) {
	t.Helper()
	if n := testutil.HeapBytes(f); n > perByte*uint64(input)+fixed {
		t.Fatalf("%s of %d bytes allocated %d (bound %d per byte + %d)", what, input, n, perByte, fixed)
	}
}

// fuzzDump reads data as a jitdump that arrives in two pieces, cut at cut,
// and checks what must hold for any input.
func fuzzDump(t *testing.T, data []byte, cut int) {
	var whole readResult
	// The smallest CODE_LOAD is 57 bytes and becomes a symbol, its name
	// and index entries; compaction copies what it keeps.
	heapBound(t, "jitdump", len(data), 256, 4<<20, func() { whole = readDumpBytes(data, len(data)) })
	if cut >= 0 && cut <= len(data) {
		split := readDumpBytes(data, cut, len(data))
		if !slices.Equal(names(whole.ix), names(split.ix)) || whole.d.bad != split.d.bad {
			t.Fatalf("read in two pieces (cut at %d): %q (%d bad); at once: %q (%d bad)",
				cut, names(split.ix), split.d.bad, names(whole.ix), whole.d.bad)
		}
	}
	for _, p := range whole.d.problems {
		if p.Offset < 0 || p.Offset > int64(len(data)) || p.File != "fuzz" || p.Reason == "" {
			t.Fatalf("problem %+v out of the file", p)
		}
	}
	checkIndex(t, whole.ix)
	checkBound(t, whole.ix, fuzzLimits)
}

type readResult struct {
	ix *Index
	d  *dumpReader
}

// fuzzLimits are small bounds, so that fuzzing reaches the index's
// compaction (bound.go) with small inputs.
var fuzzLimits = limits{symbols: 64, nameBytes: 8 << 10, lines: 256}

// readDumpBytes reads data as a growing file that reaches each size in
// turn, into an index bounded by fuzzLimits.
func readDumpBytes(data []byte, sizes ...int) readResult {
	s := &source{info: SourceInfo{Path: "fuzz"}, dump: newDumpReader("fuzz")}
	s.configure(Options{LineTables: true})
	b := builder{limits: fuzzLimits}
	r := bytes.NewReader(data)
	for _, size := range sizes {
		if err := s.dump.read(r, int64(size), func(rec *record) { s.record(&b, rec); b.bound() }); err != nil {
			panic(err) // reading memory cannot fail
		}
	}
	return readResult{b.index(), s.dump}
}

// checkBound fails when an index holds more than its bound allows.
func checkBound(t *testing.T, ix *Index, l limits) {
	names, lines := 0, len(ix.lines)
	for id := range ix.n {
		names += symbolBytes(&ix.store.slot(int32(id)).sym)
	}
	if ix.n > l.symbols || names > l.nameBytes || lines > l.lines {
		t.Fatalf("index of %d symbols, %d name bytes, %d line entries: over its bound %+v", ix.n, names, lines, l)
	}
	for s := range ix.All() {
		if len(s.Name) > maxNameLen {
			t.Fatalf("a name of %d bytes is kept", len(s.Name))
		}
	}
}

// checkIndex looks up every symbol's first and last byte: each answer
// must contain the address.
func checkIndex(t *testing.T, ix *Index) {
	for s := range ix.All() {
		for _, a := range []uint64{s.Start, s.End() - 1} {
			if got, ok := ix.Lookup(a); ok && !got.Contains(a) {
				t.Fatalf("Lookup(%#x) = %+v, which does not contain it", a, got)
			}
			if got, ok := ix.LookupAt(a, s.Loaded); ok && !got.Contains(a) {
				t.Fatalf("LookupAt(%#x) = %+v, which does not contain it", a, got)
			}
			ix.LineAt(s, a)
		}
	}
}

func FuzzJitdump(f *testing.F) {
	f.Add(sampleDump(), 100)
	w, _ := everyRecord(true)
	f.Add(w.bytes(), 70)
	f.Fuzz(func(t *testing.T, data []byte, cut int) { fuzzDump(t, data, cut) })
}

func FuzzPerfMap(f *testing.F) {
	f.Add([]byte("1000 10 JS:*a /a.js:1:1\n0x2000 0x10 long Hot.b(long)\nbad\n"), 20)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		read := func(sizes ...int) (*Index, *mapReader) {
			m := newMapReader("fuzz")
			s := &source{info: SourceInfo{Path: "fuzz"}, pmap: m}
			var b builder
			r := bytes.NewReader(data)
			for i, size := range sizes {
				if err := m.read(r, int64(size), i == len(sizes)-1, func(start, size uint64, name []byte) { s.mapLine(&b, start, size, name) }); err != nil {
					t.Fatal(err)
				}
			}
			return b.index(), m
		}
		var ix *Index
		var m *mapReader
		heapBound(t, "perf map", len(data), 64, 4<<20, func() { ix, m = read(len(data)) })
		if cut >= 0 && cut <= len(data) {
			ix2, m2 := read(cut, len(data))
			if !slices.Equal(names(ix), names(ix2)) || m.bad != m2.bad || m.line != m2.line {
				t.Fatalf("cut at %d: %q (%d bad, %d lines); at once %q (%d bad, %d lines)", cut, names(ix2), m2.bad, m2.line, names(ix), m.bad, m.line)
			}
		}
		if m.lines+m.bad+m.empty != m.line {
			t.Fatalf("%d good + %d bad + %d empty != %d lines", m.lines, m.bad, m.empty, m.line)
		}
		checkIndex(t, ix)
	})
}

func FuzzDisplayName(f *testing.F) {
	for _, s := range []string{"JS:*fibonacci /app/fib.js:1:1", "julia_f_1", "LHot;f(J)J", "long A.b(int)", "py::f:/a.py", "void [A] B::C()[Tier0]", "wasm[0]::function[1]::f"} {
		f.Add(uint8(0), s)
	}
	f.Fuzz(func(t *testing.T, rt uint8, raw string) {
		var n Name
		heapBound(t, "name", len(raw), 16, 4<<20, func() { n = DisplayName(Runtime(rt%7), raw) })
		if raw != "" && n.Name == "" {
			t.Fatalf("DisplayName(%d, %q) has no name", rt%7, raw)
		}
	})
}
