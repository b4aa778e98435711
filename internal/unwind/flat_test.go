package unwind

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stallwatch/stallwatch/internal/callframe"
)

// TestFlatStepIsCFIStep: a row's flat form (compileFlat, flatStep) unwinds
// every frame as the general rules do (cfiStep): the same caller's
// registers and CFA, or, where it declines, a frame left as it was for
// cfiStep to decide. Random rows of the forms compiled code has (and some
// it does not: expressions, register rules, rules for rsp, signal
// frames), over stack copies holding zeros, frames that do not climb,
// slots popped already and reads past the copy's end.
func TestFlatStepIsCFIStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 7))
	const base = 0x7ffd0000
	kinds := []callframe.RuleKind{callframe.RuleUnset, callframe.RuleUnset, callframe.RuleSame,
		callframe.RuleOffset, callframe.RuleOffset, callframe.RuleUndefined, callframe.RuleRegister, callframe.RuleValOffset}
	flat, taken := 0, 0
	for i := 0; i < 200000; i++ {
		var rr callframe.Row
		rr.CFAReg = []uint64{callframe.RegRSP, callframe.RegRBP, callframe.RegRBX}[rng.IntN(3)]
		rr.CFAOff = int64(rng.IntN(80)) - 16
		switch rng.IntN(40) {
		case 0:
			rr.CFAExpr = []byte{0x77, 0x08} // DW_OP_breg7 8
		case 1:
			rr.Signal = true
		}
		rr.Regs[callframe.RegRA] = callframe.Rule{Kind: callframe.RuleOffset, Off: -8}
		if rng.IntN(20) == 0 {
			rr.Regs[callframe.RegRA].Kind = kinds[rng.IntN(len(kinds))]
		}
		for r := 0; r < callframe.RegRA; r++ {
			if rng.IntN(3) != 0 {
				continue
			}
			k := kinds[rng.IntN(len(kinds))]
			if r == callframe.RegRSP && rng.IntN(4) != 0 {
				k = callframe.RuleUnset
			}
			rr.Regs[r] = callframe.Rule{Kind: k, Off: -8 * int64(2+rng.IntN(8)), Reg: uint8(rng.IntN(callframe.RegRA))}
		}
		ruled := ruledRegs(&rr)
		e := cachedRule{row: &rr, ruled: ruled, flat: compileFlat(&rr, ruled)}
		if !e.flat.ok {
			continue
		}
		flat++

		stack := make([]byte, 8*rng.IntN(40))
		for o := 0; o+8 <= len(stack); o += 8 {
			v := uint64(0)
			if rng.IntN(6) != 0 {
				v = base + uint64(rng.IntN(1024))
			}
			binary.LittleEndian.PutUint64(stack[o:], v)
		}
		var regs callframe.RegState
		for r := uint64(0); r < callframe.NumRegs; r++ {
			if rng.IntN(4) != 0 {
				regs.Set(r, base+uint64(rng.IntN(512))-64)
			}
		}
		sp := base + uint64(rng.IntN(64))
		regs.Set(callframe.RegRSP, sp)
		regs.Set(callframe.RegRA, 0x401000+uint64(rng.IntN(64)))
		start := frameState{regs: regs}
		w := walker{onStack: true, stack: dumpMemory{base: base, b: stack}}

		fs, gs := start, start
		cfa, ok := w.flatStep(&fs, &e)
		want := w.cfiStep(&gs, nil, &rr, ruled, 0)
		if !ok {
			if !sameRegs(&fs.regs, &start.regs) || fs.exact != start.exact {
				t.Fatalf("row %+v: flatStep declined and changed the frame: %v, was %v", rr, fs.regs, start.regs)
			}
			continue
		}
		taken++
		if want.end || want.how != CFI || want.cfa != cfa {
			t.Fatalf("row %+v, regs %v: flatStep took cfa %#x; cfiStep: %+v", rr, start.regs, cfa, want)
		}
		if !sameRegs(&fs.regs, &gs.regs) || fs.exact != gs.exact || fs.first != gs.first {
			t.Fatalf("row %+v, regs %v: flatStep gives %v, cfiStep %v", rr, start.regs, fs.regs, gs.regs)
		}
	}
	if flat < 10000 || taken < 1000 {
		t.Fatalf("only %d flat rows, %d frames flatStep took: the test does not test it", flat, taken)
	}
}

// TestWarmFPStepIsFPStep: the warm step by a frame record (warmFPStep)
// unwinds every frame as fpStepState does (the same caller's registers
// and CFA), or, where it declines, leaves the frame as it was for
// fpStepState to decide. Random frame pointers (unknown, zero,
// misaligned, below the stack pointer, past the copy's end) over stack
// copies whose records link up, down, to zero or hold a zero return
// address.
func TestWarmFPStepIsFPStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 31))
	const base = 0x7ffd0000
	taken := 0
	for i := 0; i < 100000; i++ {
		stack := make([]byte, 8*rng.IntN(40))
		for o := 0; o+8 <= len(stack); o += 8 {
			v := uint64(0)
			if rng.IntN(6) != 0 {
				v = base + uint64(rng.IntN(512))&^uint64(rng.IntN(2)*7)
			}
			binary.LittleEndian.PutUint64(stack[o:], v)
		}
		var regs callframe.RegState
		sp := base + 8*uint64(rng.IntN(8))
		regs.Set(callframe.RegRSP, sp)
		regs.Set(callframe.RegRA, 0x401000+uint64(rng.IntN(64)))
		regs.Set(callframe.RegRBX, 7) // a caller found by its record knows no other register
		if rng.IntN(8) != 0 {
			regs.Set(callframe.RegRBP, base+uint64(rng.IntN(400))-32)
		}
		start := frameState{regs: regs, exact: rng.IntN(2) == 0, first: rng.IntN(2) == 0}
		w := walker{onStack: true, stack: dumpMemory{base: base, b: stack}}

		fs, gs := start, start
		cfa, ok := w.warmFPStep(&fs)
		want := w.fpStepState(&gs, nil)
		if !ok {
			if !sameRegs(&fs.regs, &start.regs) || fs != start {
				t.Fatalf("regs %v: warmFPStep declined and changed the frame: %v", start.regs, fs.regs)
			}
			continue
		}
		taken++
		if want.end || want.how != FramePointerChain || want.cfa != cfa {
			t.Fatalf("regs %v, stack %x: warmFPStep took cfa %#x; fpStepState: %+v", start.regs, stack, cfa, want)
		}
		if !sameRegs(&fs.regs, &gs.regs) || fs.exact != gs.exact || fs.first != gs.first {
			t.Fatalf("regs %v: warmFPStep gives %v, fpStepState %v", start.regs, fs.regs, gs.regs)
		}
	}
	if taken < 1000 {
		t.Fatalf("only %d frames warmFPStep took: the test does not test it", taken)
	}
}

// sameRegs reports whether two register sets know the same registers
// with the same values.
func sameRegs(a, b *callframe.RegState) bool {
	for r := uint64(0); r < callframe.NumRegs; r++ {
		va, oka := a.Get(r)
		vb, okb := b.Get(r)
		if oka != okb || va != vb {
			return false
		}
	}
	return true
}

// TestCompileFlat: which rows get a flat form.
func TestCompileFlat(t *testing.T) {
	ra := callframe.Rule{Kind: callframe.RuleOffset, Off: -8}
	rbp := callframe.Rule{Kind: callframe.RuleOffset, Off: -16}
	row := func(edit func(*callframe.Row)) *callframe.Row {
		rr := &callframe.Row{Rules: callframe.Rules{CFAReg: callframe.RegRSP, CFAOff: 16}}
		rr.Regs[callframe.RegRA], rr.Regs[callframe.RegRBP] = ra, rbp
		edit(rr)
		return rr
	}
	for _, tc := range []struct {
		name string
		row  *callframe.Row
		flat bool
	}{
		{"rsp+16, ra and rbp saved", row(func(*callframe.Row) {}), true},
		{"rbp-based, rbx same", row(func(rr *callframe.Row) {
			rr.CFAReg = callframe.RegRBP
			rr.Regs[callframe.RegRBX] = callframe.Rule{Kind: callframe.RuleSame}
		}), true},
		{"six callee-saved registers", row(func(rr *callframe.Row) {
			for _, r := range []int{callframe.RegRBX, callframe.RegR12, 13, 14, callframe.RegR15} {
				rr.Regs[r] = callframe.Rule{Kind: callframe.RuleOffset, Off: int64(-24 - 8*r)}
			}
		}), true},
		{"CFA expression (PLT)", row(func(rr *callframe.Row) { rr.CFAExpr = []byte{0x77, 0x08} }), false},
		{"signal frame", row(func(rr *callframe.Row) { rr.Signal = true }), false},
		{"ra undefined (outermost)", row(func(rr *callframe.Row) { rr.Regs[callframe.RegRA].Kind = callframe.RuleUndefined }), false},
		{"register rule", row(func(rr *callframe.Row) {
			rr.Regs[callframe.RegRBX] = callframe.Rule{Kind: callframe.RuleRegister, Reg: callframe.RegR12}
		}), false},
		{"rule for rsp", row(func(rr *callframe.Row) { rr.Regs[callframe.RegRSP] = callframe.Rule{Kind: callframe.RuleValOffset} }), false},
		{"offset past int32", row(func(rr *callframe.Row) { rr.Regs[callframe.RegRBP].Off = 1 << 40 }), false},
	} {
		if got := compileFlat(tc.row, ruledRegs(tc.row)).ok; got != tc.flat {
			t.Errorf("%s: flat %v, want %v", tc.name, got, tc.flat)
		}
	}
}
