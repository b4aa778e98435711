package unwind

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/stallwatch/stallwatch/internal/callframe"
	"github.com/stallwatch/stallwatch/internal/objfile"
)

// fixtureGoTable is package objfile's Go 1.20 pclntab fixture: main.f at
// link-time 0x1000 (its frame pushed at +1, grown to 0x28 at +8) and
// runtime.goexit at 0x1020.
func fixtureGoTable(t testing.TB) *objfile.GoTable {
	t.Helper()
	b, err := os.ReadFile("../objfile/testdata/gotable.bin")
	if err != nil {
		t.Fatal(err)
	}
	g, err := objfile.ParseGoTable(b, 0x1000, "fixture")
	if err != nil || g == nil {
		t.Fatalf("ParseGoTable: %v, %v", g, err)
	}
	return g
}

// TestGoStep: a Go frame is unwound from its frame size alone: the
// return address above it, the caller's frame pointer just below that;
// runtime.goexit ends the walk.
func TestGoStep(t *testing.T) {
	g := fixtureGoTable(t)
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
	if bp, ok := s.regs.Get(callframe.RegRBP); !ok || bp != 0x7100 {
		t.Errorf("caller's frame pointer %#x (%v), want 0x7100", bp, ok)
	}
	// In goexit the walk is over.
	s = newFrameState(Regs{IP: 0x1021, SP: 0x7000})
	if res, ok := w.goStep(&s, &codeRange{gotab: g}, 0x1021); !ok || !res.end || res.cut.Truncated() {
		t.Errorf("goStep in goexit: %+v, want the end of the stack", res)
	}
}
