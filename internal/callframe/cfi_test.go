package callframe

import (
	"encoding/binary"
	"strings"
	"testing"
)

// ehBuilder assembles a .eh_frame section for table tests, the way GCC
// lays it out: CIEs and FDEs with "zR" augmentation and pc-relative sdata4
// addresses unless told otherwise.
type ehBuilder struct {
	addr uint64 // link-time address of the section
	b    []byte
}

func uleb(v uint64) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, c|0x80)
			continue
		}
		return append(out, c)
	}
}

func sleb(v int64) []byte {
	var out []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(out, c)
		}
		out = append(out, c|0x80)
	}
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// cie appends a CIE and returns its offset. aug is the augmentation
// string; augData its data (after 'z'); initial its instructions.
func (e *ehBuilder) cie(aug string, augData []byte, initial []byte) int {
	off := len(e.b)
	body := cat(le32(0), []byte{1}, []byte(aug), []byte{0}, uleb(1), sleb(-8), []byte{RegRA})
	if strings.HasPrefix(aug, "z") {
		body = cat(body, uleb(uint64(len(augData))), augData)
	}
	body = cat(body, initial)
	for len(body)%8 != 4 {
		body = append(body, cfaNop)
	}
	e.b = cat(e.b, le32(uint32(len(body))), body)
	return off
}

// fde appends an FDE for [begin, begin+size) under the CIE at cieOff,
// with pc-relative sdata4 addresses.
func (e *ehBuilder) fde(cieOff int, begin, size uint64, prog []byte) {
	off := len(e.b)
	idField := off + 4
	pcField := uint64(off + 8)
	rel := int32(int64(begin) - int64(e.addr+pcField))
	body := cat(le32(uint32(idField-cieOff)), le32(uint32(rel)), le32(uint32(size)), uleb(0), prog)
	for len(body)%8 != 4 {
		body = append(body, cfaNop)
	}
	e.b = cat(e.b, le32(uint32(len(body))), body)
}

func (e *ehBuilder) done() []byte { return cat(e.b, le32(0)) }

// gccCIE is the CIE GCC emits on x86-64: CFA = rsp+8, RA at CFA-8.
func gccCIE(e *ehBuilder) int {
	return e.cie("zR", []byte{pePcrel | peSdata4}, cat([]byte{cfaDefCfa}, uleb(RegRSP), uleb(8), []byte{cfaOffset | RegRA}, uleb(1)))
}

func TestRowFor(t *testing.T) {
	// A function with a frame pointer: push rbp; mov rbp,rsp; ...; leave; ret
	fpProg := cat(
		[]byte{cfaAdvanceLoc | 1, cfaDefCfaOffset}, uleb(16), []byte{cfaOffset | RegRBP}, uleb(2),
		[]byte{cfaAdvanceLoc | 3, cfaDefCfaRegister}, uleb(RegRBP),
		[]byte{cfaAdvanceLoc2}, binary.LittleEndian.AppendUint16(nil, 0x20),
		[]byte{cfaDefCfa}, uleb(RegRSP), uleb(8),
	)
	// remember/restore around an early return, offsets pushed and popped.
	stateProg := cat(
		[]byte{cfaAdvanceLoc | 1, cfaDefCfaOffset}, uleb(16), []byte{cfaOffset | RegRBX}, uleb(2),
		[]byte{cfaAdvanceLoc | 4, cfaRememberState, cfaDefCfaOffset}, uleb(8), []byte{cfaRestore | RegRBX},
		[]byte{cfaAdvanceLoc | 1, cfaRestoreState},
		[]byte{cfaAdvanceLoc1, 10, cfaSameValue}, uleb(RegRBX),
		[]byte{cfaAdvanceLoc | 1, cfaUndefined}, uleb(RegRA),
	)
	// The PLT's CFA expression: rsp+8 + ((rip&15) >= 11 ? 8 : 0).
	pltExpr := []byte{0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}
	pltProg := cat([]byte{cfaDefCfaExpression}, uleb(uint64(len(pltExpr))), pltExpr)
	// Register, val_offset, offset_extended_sf, def_cfa_sf, advance_loc4.
	miscProg := cat(
		[]byte{cfaRegister}, uleb(RegRBP), uleb(RegRBX),
		[]byte{cfaValOffset}, uleb(RegR12), uleb(1),
		[]byte{cfaOffsetExtendedSf}, uleb(RegR15), sleb(3),
		[]byte{cfaAdvanceLoc4}, le32(0x100),
		[]byte{cfaDefCfaSf}, uleb(RegRBP), sleb(-2),
		[]byte{cfaGNUArgsSize}, uleb(16),
	)
	e := &ehBuilder{addr: 0x1000}
	c := gccCIE(e)
	e.fde(c, 0x2000, 0x40, fpProg)
	e.fde(c, 0x3000, 0x40, stateProg)
	e.fde(c, 0x4000, 0x20, pltProg)
	e.fde(c, 0x5000, 0x200, miscProg)
	f, err := ParseEhFrame("test", e.done(), e.addr)
	if err != nil || f.Bad != 0 {
		t.Fatalf("parse: %v (%d bad)", err, f.Bad)
	}
	type want struct {
		cfaReg uint64
		cfaOff int64
		expr   bool
		rules  map[int]Rule
	}
	ra := Rule{Kind: RuleOffset, Off: -8}
	tests := []struct {
		name string
		pc   uint64
		want want
	}{
		{"fp entry", 0x2000, want{RegRSP, 8, false, map[int]Rule{RegRA: ra, RegRBP: {}}}},
		{"fp after push", 0x2001, want{RegRSP, 16, false, map[int]Rule{RegRA: ra, RegRBP: {Kind: RuleOffset, Off: -16}}}},
		{"fp body", 0x2010, want{RegRBP, 16, false, map[int]Rule{RegRBP: {Kind: RuleOffset, Off: -16}}}},
		{"fp after leave", 0x2024, want{RegRSP, 8, false, map[int]Rule{RegRBP: {Kind: RuleOffset, Off: -16}}}},
		{"state pushed", 0x3003, want{RegRSP, 16, false, map[int]Rule{RegRBX: {Kind: RuleOffset, Off: -16}}}},
		{"state early return", 0x3005, want{RegRSP, 8, false, map[int]Rule{RegRBX: {}}}},
		{"state restored", 0x3006, want{RegRSP, 16, false, map[int]Rule{RegRBX: {Kind: RuleOffset, Off: -16}}}},
		{"same value", 0x3010, want{RegRSP, 16, false, map[int]Rule{RegRBX: {Kind: RuleSame}}}},
		{"ra undefined", 0x3011, want{RegRSP, 16, false, map[int]Rule{RegRA: {Kind: RuleUndefined}}}},
		{"plt expression", 0x4008, want{expr: true}},
		{"misc before advance", 0x5000, want{RegRSP, 8, false, map[int]Rule{
			RegRBP: {Kind: RuleRegister, Reg: RegRBX}, RegR12: {Kind: RuleValOffset, Off: -8}, RegR15: {Kind: RuleOffset, Off: -24}}}},
		{"misc after advance4", 0x5100, want{RegRBP, 16, false, nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rr, err := f.RowAt(tc.pc)
			if err != nil || rr == nil {
				t.Fatalf("RowAt(%#x): %v, %v", tc.pc, rr, err)
			}
			r := rr.Rules
			if tc.want.expr {
				if r.CFAExpr == nil {
					t.Fatalf("CFA is %s%+d, want an expression", RegName(r.CFAReg), r.CFAOff)
				}
				return
			}
			if r.CFAExpr != nil || r.CFAReg != tc.want.cfaReg || r.CFAOff != tc.want.cfaOff {
				t.Errorf("CFA %s%+d (expr %v), want %s%+d", RegName(r.CFAReg), r.CFAOff, r.CFAExpr != nil, RegName(tc.want.cfaReg), tc.want.cfaOff)
			}
			for reg, ru := range tc.want.rules {
				got := r.Regs[reg]
				if got.Kind != ru.Kind || got.Off != ru.Off || got.Reg != ru.Reg {
					t.Errorf("%s rule %+v, want %+v", RegName(uint64(reg)), got, ru)
				}
			}
		})
	}
	if d, _ := f.find(0x2040); d != nil {
		t.Errorf("pc past the FDE's end found FDE %#x..%#x", d.begin, d.end)
	}
	if d, _ := f.find(0x1fff); d != nil {
		t.Errorf("pc before every FDE found one")
	}
}

// TestPLTExpression evaluates the CFA expression of a PLT entry at both of
// its halves: before the push the CFA is rsp+8, after it rsp+16.
func TestPLTExpression(t *testing.T) {
	expr := []byte{0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}
	for _, tc := range []struct{ rip, want uint64 }{{0x1000, 0x7008}, {0x100a, 0x7008}, {0x100b, 0x7010}, {0x100f, 0x7010}} {
		var rs RegState
		rs.Set(RegRSP, 0x7000)
		rs.Set(RegRA, tc.rip)
		got, err := EvalExpr(expr, &rs, dump{})
		if err != nil || got != tc.want {
			t.Errorf("rip %#x: CFA %#x, %v; want %#x", tc.rip, got, err, tc.want)
		}
	}
}

func TestEvalExprErrors(t *testing.T) {
	var rs RegState
	rs.Set(RegRSP, 0x7000)
	for name, expr := range map[string][]byte{
		"underflow":        {0x22},
		"unknown register": {0x73, 0}, // breg3: rbx unknown
		"loop":             {0x2f, 0xfd, 0xff},
		"deref unmapped":   {0x30, 0x06},
		"division by zero": {0x31, 0x30, 0x1b},
		"register op":      {0x50},
		"truncated":        {0x0e, 1, 2},
		"bad branch":       {0x2f, 0x00, 0x10},
		"empty":            {},
	} {
		if v, err := EvalExpr(expr, &rs, dump{base: 0x7000, b: make([]byte, 16)}); err == nil {
			t.Errorf("%s: evaluated to %#x, want an error", name, v)
		}
	}
}

// TestParseErrors: malformed sections give errors naming the offset and
// the reason, and a bad FDE costs only itself.
func TestParseErrors(t *testing.T) {
	e := &ehBuilder{addr: 0x1000}
	c := gccCIE(e)
	e.fde(c, 0x2000, 0x10, nil)
	good := e.done()

	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"truncated length", good[:2], "truncated"},
		{"length past end", cat(le32(1000), le32(0)), "past the section's end"},
		{"version", func() []byte {
			b := append([]byte(nil), good...)
			b[8] = 9
			return b
		}(), "CIE version 9"},
	}
	for _, tc := range tests {
		_, err := ParseEhFrame("lib.so", tc.data, 0x1000)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "lib.so: .eh_frame offset") {
			t.Errorf("%s: error %v, want one naming the file, the offset and %q", tc.name, err, tc.want)
		}
	}
	// An FDE whose CIE pointer leads nowhere is skipped, the others kept.
	e2 := &ehBuilder{addr: 0x1000}
	c2 := gccCIE(e2)
	e2.fde(c2, 0x2000, 0x10, nil)
	e2.fde(len(e2.b)+100, 0x3000, 0x10, nil) // CIE pointer before the section
	e2.fde(c2, 0x4000, 0x10, nil)
	f, err := ParseEhFrame("lib.so", e2.done(), 0x1000)
	if err != nil || f.Bad != 1 || len(f.fdes) != 2 {
		t.Errorf("bad FDE: err %v, %d kept; want 1 bad, 2 kept", err, len(f.fdes))
	}
}
