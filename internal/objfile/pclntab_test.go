package objfile

import (
	"bytes"
	"encoding/binary"
	"flag"
	"os"
	"testing"
)

// goTableFixture is a minimal Go 1.20 pclntab: two functions at text
// offsets 0 and 0x20 (main.f with a frame pushed at +1 and grown to 0x28
// at +8, in file "main.go" at lines 10 then 11; runtime.goexit.abi0), made
// as the linker lays them out. testdata/gotable.bin holds the same bytes
// for package internal/unwind's tests of walking with it.
func goTableFixture() []byte {
	le := binary.LittleEndian
	names := []byte("main.f\x00runtime.goexit.abi0\x00")
	// pcsp of main.f: value 0 over [0,1), 8 over [1,8), 0x28 over [8,0x20).
	// Encoded as zig-zag value deltas and pc deltas: (+1 → 0, pc+1),
	// (+8, pc+7), (+0x20, pc+0x18), end.
	pcsp := []byte{2, 1, 16, 7, 64, 0x18, 0}
	// pcsp of goexit: 0 over [0,0x10).
	pcsp2 := []byte{2, 0x10, 0}
	// pcfile of main.f: file 0 over [0,0x20); pcln: 10 over [0,8), 11
	// over [8,0x20).
	pcfile := []byte{2, 0x20, 0}
	pcln := []byte{22, 8, 2, 0x18, 0}
	pctab := append([]byte{0}, pcsp...)
	pcsp2At := len(pctab)
	pctab = append(pctab, pcsp2...)
	pcfileAt := len(pctab)
	pctab = append(pctab, pcfile...)
	pclnAt := len(pctab)
	pctab = append(pctab, pcln...)
	cutab := le.AppendUint32(nil, 0) // unit 0's file 0 is at filetab offset 0
	filetab := []byte("main.go\x00")
	const funcSize = 4*10 + 4
	// functab: (entryOff, funcOff) × 3, then the two _func records.
	ftab := make([]byte, 3*8+2*funcSize)
	le.PutUint32(ftab[0:], 0)
	le.PutUint32(ftab[4:], 3*8)
	le.PutUint32(ftab[8:], 0x20)
	le.PutUint32(ftab[12:], 3*8+funcSize)
	le.PutUint32(ftab[16:], 0x30) // end of text
	f1 := ftab[3*8:]
	le.PutUint32(f1[0:], 0)
	le.PutUint32(f1[4:], 0) // "main.f"
	le.PutUint32(f1[16:], 1)
	le.PutUint32(f1[20:], uint32(pcfileAt))
	le.PutUint32(f1[24:], uint32(pclnAt))
	f2 := ftab[3*8+funcSize:]
	le.PutUint32(f2[0:], 0x20)
	le.PutUint32(f2[4:], 7) // "runtime.goexit.abi0"
	le.PutUint32(f2[16:], uint32(pcsp2At))

	const hdr = 8 + 8*8
	b := make([]byte, hdr)
	le.PutUint32(b, goMagic120)
	b[6], b[7] = 1, 8
	put := func(i int, v uint64) { le.PutUint64(b[8+8*i:], v) }
	put(0, 2) // nfunc
	put(1, 1) // nfiles
	put(2, 0) // textStart: filled at run time
	at := hdr
	put(3, uint64(at))
	at += len(names)
	put(6, uint64(at))
	at += len(pctab)
	put(4, uint64(at))
	at += len(cutab)
	put(5, uint64(at))
	at += len(filetab)
	put(7, uint64(at))
	for _, part := range [][]byte{names, pctab, cutab, filetab, ftab} {
		b = append(b, part...)
	}
	return b
}

var update = flag.Bool("update", false, "rewrite testdata/gotable.bin")

// TestGoTableFixtureFile keeps testdata/gotable.bin the fixture's bytes.
func TestGoTableFixtureFile(t *testing.T) {
	if *update {
		if err := os.WriteFile("testdata/gotable.bin", goTableFixture(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("testdata/gotable.bin")
	if err != nil || !bytes.Equal(b, goTableFixture()) {
		t.Fatalf("testdata/gotable.bin is not the fixture (%v): go test -run FixtureFile -update ./internal/objfile", err)
	}
}

func TestGoTable(t *testing.T) {
	g, err := ParseGoTable(goTableFixture(), 0x1000, "fixture")
	if err != nil || g == nil {
		t.Fatalf("ParseGoTable: %v, %v", g, err)
	}
	for _, tc := range []struct {
		pc    uint64
		delta uint64
		ok    bool
	}{
		{0x1000, 0, true}, {0x1001, 8, true}, {0x1007, 8, true}, {0x1008, 0x28, true},
		{0x101f, 0x28, true}, {0x1020, 0, true}, {0x0fff, 0, false}, {0x1030, 0, false},
	} {
		d, ok := g.SPDelta(tc.pc)
		if ok != tc.ok || d != tc.delta {
			t.Errorf("SPDelta(%#x) = %#x, %v; want %#x, %v", tc.pc, d, ok, tc.delta, tc.ok)
		}
	}
	if g.FrameKind(0x1020) != GoOutermost || g.FrameKind(0x1008) != GoNormal {
		t.Errorf("goexit range %#x-%#x", g.goexitLo, g.goexitHi)
	}
	for _, tc := range []struct {
		pc   uint64
		fn   string
		file string
		line int64
	}{
		{0x1000, "main.f", "main.go", 10}, {0x1007, "main.f", "main.go", 10}, {0x1008, "main.f", "main.go", 11},
		{0x1020, "runtime.goexit.abi0", "", 0},
	} {
		fn, file, line, ok := g.Line(tc.pc)
		if !ok || fn != tc.fn || file != tc.file || line != tc.line {
			t.Errorf("Line(%#x) = %q %q %d %v; want %q %q %d", tc.pc, fn, file, line, ok, tc.fn, tc.file, tc.line)
		}
	}
	st := &symtab{}
	if n := g.addTo(st); n != 2 {
		t.Errorf("addTo added %d functions, want 2", n)
	}
}

func TestGoTableRefusesLies(t *testing.T) {
	good := goTableFixture()
	for name, mutate := range map[string]func([]byte){
		"nfunc beyond the table":  func(b []byte) { binary.LittleEndian.PutUint64(b[8:], 1<<40) },
		"pc table beyond the end": func(b []byte) { binary.LittleEndian.PutUint64(b[8+6*8:], 1<<40) },
		"pointer size 3":          func(b []byte) { b[7] = 3 },
	} {
		b := append([]byte(nil), good...)
		mutate(b)
		if g, err := ParseGoTable(b, 0x1000, "fixture"); err == nil {
			t.Errorf("%s: parsed (%v)", name, g != nil)
		}
	}
	if g, err := ParseGoTable([]byte("not a pclntab at all, just some bytes here........................."), 0, "x"); g != nil || err != nil {
		t.Errorf("foreign data: %v, %v; want nil, nil", g, err)
	}
}

// TestGoTableFlags: a function that writes SP itself (mcall,
// systemstack) or starts a stack says so.
func TestGoTableFlags(t *testing.T) {
	g, err := ParseGoTable(goTableFixture(), 0x1000, "fixture")
	if err != nil || g == nil {
		t.Fatal(err)
	}
	f, ok := g.funcFor(0x1010)
	if !ok {
		t.Fatal("main.f not found")
	}
	f.b[41] = goSPWrite
	if k := g.FrameKind(0x1010); k != GoStackSwitch {
		t.Errorf("FrameKind of a stack-switching function: %v", k)
	}
	f.b[41] = goTopFrame
	if k := g.FrameKind(0x1010); k != GoOutermost {
		t.Errorf("FrameKind of a top frame: %v", k)
	}
}
