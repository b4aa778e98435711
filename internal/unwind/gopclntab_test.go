package unwind

import (
	"encoding/binary"
	"testing"
)

// goTableFixture is a minimal Go 1.20 pclntab: two functions at text
// offsets 0 and 0x20 (main.f with a frame pushed at +1 and grown to 0x28
// at +8; runtime.goexit.abi0), made as the linker lays them out.
func goTableFixture() []byte {
	le := binary.LittleEndian
	names := []byte("main.f\x00runtime.goexit.abi0\x00")
	// pcsp of main.f: value 0 over [0,1), 8 over [1,8), 0x28 over [8,0x20).
	// Encoded as zig-zag value deltas and pc deltas: (+1 → 0, pc+1),
	// (+8, pc+7), (+0x20, pc+0x18), end.
	pcsp := []byte{2, 1, 16, 7, 64, 0x18, 0}
	// pcsp of goexit: 0 over [0,0x10).
	pcsp2 := []byte{2, 0x10, 0}
	pctab := append(append([]byte{0}, pcsp...), pcsp2...)
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
	f2 := ftab[3*8+funcSize:]
	le.PutUint32(f2[0:], 0x20)
	le.PutUint32(f2[4:], 7) // "runtime.goexit.abi0"
	le.PutUint32(f2[16:], uint32(1+len(pcsp)))

	const hdr = 8 + 8*8
	b := make([]byte, hdr)
	le.PutUint32(b, goMagic120)
	b[6], b[7] = 1, 8
	put := func(i int, v uint64) { le.PutUint64(b[8+8*i:], v) }
	put(0, 2) // nfunc
	put(2, 0) // textStart: filled at run time
	put(3, uint64(hdr))
	put(6, uint64(hdr+len(names)))
	put(7, uint64(hdr+len(names)+len(pctab)))
	b = append(b, names...)
	b = append(b, pctab...)
	return append(b, ftab...)
}

func TestGoTable(t *testing.T) {
	g, err := parseGoTable(goTableFixture(), 0x1000, "fixture")
	if err != nil || g == nil {
		t.Fatalf("parseGoTable: %v, %v", g, err)
	}
	for _, tc := range []struct {
		pc    uint64
		delta uint64
		ok    bool
	}{
		{0x1000, 0, true}, {0x1001, 8, true}, {0x1007, 8, true}, {0x1008, 0x28, true},
		{0x101f, 0x28, true}, {0x1020, 0, true}, {0x0fff, 0, false}, {0x1030, 0, false},
	} {
		d, _, ok := g.spDelta(tc.pc)
		if ok != tc.ok || d != tc.delta {
			t.Errorf("spDelta(%#x) = %#x, %v; want %#x, %v", tc.pc, d, ok, tc.delta, tc.ok)
		}
	}
	if !g.isGoexit(0x1020) || g.isGoexit(0x1008) {
		t.Errorf("goexit range %#x-%#x", g.goexitLo, g.goexitHi)
	}

	// A frame of main.f at +0x10 with SP 0x7000: the return address is at
	// SP+0x28, the caller's frame pointer just below it.
	mem := make([]byte, 0x40)
	binary.LittleEndian.PutUint64(mem[0x28:], 0x4242)
	binary.LittleEndian.PutUint64(mem[0x20:], 0x7100)
	w := walker{mem: DumpMemory(0x7000, mem)}
	s := newFrameState(Regs{IP: 0x1010, SP: 0x7000})
	res, ok := w.goStep(&s, &codeRange{gotab: g}, 0x1010)
	if !ok || res.how != GoTable || s.ip() != 0x4242 || s.sp() != 0x7030 {
		t.Fatalf("goStep: %+v ok=%v; ip %#x sp %#x, want ip 0x4242 sp 0x7030", res, ok, s.ip(), s.sp())
	}
	if bp, ok := s.regs.get(regRBP); !ok || bp != 0x7100 {
		t.Errorf("caller's frame pointer %#x (%v), want 0x7100", bp, ok)
	}
	// In goexit the walk is over.
	s = newFrameState(Regs{IP: 0x1021, SP: 0x7000})
	if res, ok := w.goStep(&s, &codeRange{gotab: g}, 0x1021); !ok || res.end != EndOfStack {
		t.Errorf("goStep in goexit: %+v, want the end of the stack", res)
	}
}

func TestGoTableRefusesLies(t *testing.T) {
	good := goTableFixture()
	for name, mutate := range map[string]func([]byte){
		"nfunc beyond the table":  func(b []byte) { binary.LittleEndian.PutUint64(b[8:], 1<<40) },
		"pc table beyond the end": func(b []byte) { binary.LittleEndian.PutUint64(b[8+6*8:], 1<<40) },
		"32-bit pointers":         func(b []byte) { b[7] = 4 },
	} {
		b := append([]byte(nil), good...)
		mutate(b)
		if g, err := parseGoTable(b, 0x1000, "fixture"); err == nil {
			t.Errorf("%s: parsed (%v)", name, g != nil)
		}
	}
	if g, err := parseGoTable([]byte("not a pclntab at all, just some bytes here........................."), 0, "x"); g != nil || err != nil {
		t.Errorf("foreign data: %v, %v; want nil, nil", g, err)
	}
}

// TestGoTableStackSwitch: a function that writes SP itself (mcall,
// systemstack) ends the walk instead of reading garbage as its caller.
func TestGoTableStackSwitch(t *testing.T) {
	data := goTableFixture()
	g, err := parseGoTable(data, 0x1000, "fixture")
	if err != nil || g == nil {
		t.Fatal(err)
	}
	_, f, ok := g.funcFor(0x1010)
	if !ok {
		t.Fatal("main.f not found")
	}
	f[41] = goSPWrite
	w := walker{mem: DumpMemory(0x7000, make([]byte, 0x40))}
	s := newFrameState(Regs{IP: 0x1010, SP: 0x7000})
	res, ok := w.goStep(&s, &codeRange{gotab: g}, 0x1010)
	if !ok || res.end == "" || res.end == EndOfStack {
		t.Errorf("goStep in a stack-switching function: %+v, want the walk to end there with the reason", res)
	}
	f[41] = goTopFrame
	if res, _ := w.goStep(&s, &codeRange{gotab: g}, 0x1010); res.end != EndOfStack {
		t.Errorf("goStep in a top frame: %+v, want the end of the stack", res)
	}
}
