package unwind

import "testing"

// FuzzEhFrame: any section parses without panicking or allocating beyond
// its size, and every FDE it yields can be evaluated at any address.
func FuzzEhFrame(f *testing.F) {
	e := &ehBuilder{addr: 0x1000}
	c := gccCIE(e)
	e.fde(c, 0x2000, 0x40, cat([]byte{cfaAdvanceLoc | 1, cfaDefCfaOffset}, uleb(16), []byte{cfaOffset | regRBP}, uleb(2), []byte{cfaRememberState, cfaRestoreState}))
	e.fde(c, 0x3000, 0x20, cat([]byte{cfaDefCfaExpression, 3, 0x77, 8, 0x06}))
	f.Add(e.done())
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, _, err := parseEhFrame("fuzz", data, 0x1000)
		if err != nil {
			return
		}
		for _, d := range fr.fdes {
			for _, pc := range []uint64{d.begin, d.begin + (d.end-d.begin)/2, d.end - 1} {
				rr, err := fr.rowAt(pc)
				if err != nil || rr == nil {
					continue
				}
				w := walker{lookup: func(uint64) *codeRange { return nil }, mem: DumpMemory(0x7000, make([]byte, 256))}
				s := newFrameState(Regs{IP: pc, SP: 0x7000, BP: 0x7010, BPKnown: true})
				w.cfiStep(&s, rr, d.begin)
			}
		}
	})
}

// FuzzExpr: DWARF expressions evaluate or fail, never panic or run away.
func FuzzExpr(f *testing.F) {
	f.Add([]byte{0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22})
	f.Add([]byte{0x77, 0x10, 0x06, 0x23, 0x08})
	f.Add([]byte{0x30, 0x28, 0x02, 0x00, 0x31, 0x2f, 0x01, 0x00, 0x32})
	f.Fuzz(func(t *testing.T, expr []byte) {
		var rs regState
		rs.set(regRSP, 0x7000)
		rs.set(regRA, 0x1234)
		evalExpr(expr, &rs, DumpMemory(0x7000, make([]byte, 64)), 0x7008)
	})
}

// FuzzGoTable: any pclntab parses or is refused, and every pc of it can be
// looked up and stepped through, without panicking or allocating.
func FuzzGoTable(f *testing.F) {
	f.Add(goTableFixture())
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := parseGoTable(data, 0x1000, "fuzz")
		if err != nil || g == nil {
			return
		}
		for _, pc := range []uint64{0x1000, 0x1001, 0x1010, 0x1020, 0x1fff} {
			if _, _, ok := g.spDelta(pc); !ok {
				continue
			}
			w := walker{mem: DumpMemory(0x7000, make([]byte, 256))}
			s := newFrameState(Regs{IP: pc, SP: 0x7000})
			w.goStep(&s, &codeRange{gotab: g}, pc)
		}
	})
}
