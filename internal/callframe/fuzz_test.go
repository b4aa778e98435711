package callframe

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// The sections and expressions below come from files and JIT code the
// target controls: bad input gives an error, no panic, no hang, and no
// allocation beyond a bound proportional to the input (measured, not
// assumed).

// checkAlloc fails t when f allocates more than perByte bytes per input
// byte plus a fixed slack.
func checkAlloc(t *testing.T, what string, input int, perByte uint64, f func()) {
	t.Helper()
	const slack = 4 << 20
	if n := testutil.HeapBytes(f); n > uint64(input)*perByte+slack {
		t.Fatalf("%s of %d bytes allocated %d bytes (bound %d)", what, input, n, uint64(input)*perByte+slack)
	}
}

// FuzzEhFrame: any section parses or is refused, and every FDE it yields
// can be evaluated at any address, within a bound of its size.
func FuzzEhFrame(f *testing.F) {
	e := &ehBuilder{addr: 0x1000}
	c := gccCIE(e)
	e.fde(c, 0x2000, 0x40, cat([]byte{cfaAdvanceLoc | 1, cfaDefCfaOffset}, uleb(16), []byte{cfaOffset | RegRBP}, uleb(2), []byte{cfaRememberState, cfaRestoreState}))
	e.fde(c, 0x3000, 0x20, cat([]byte{cfaDefCfaExpression, 3, 0x77, 8, 0x06}))
	f.Add(e.done())
	f.Fuzz(func(t *testing.T, data []byte) {
		checkAlloc(t, ".eh_frame", len(data), 64, func() {
			fr, err := ParseEhFrame("fuzz", data, 0x1000)
			if err != nil {
				return
			}
			if fr.Len()+fr.Bad > len(data)/8+1 {
				t.Fatalf("%d FDEs from %d bytes", fr.Len()+fr.Bad, len(data))
			}
			mem := dump{base: 0x7000, b: make([]byte, 256)}
			for _, d := range fr.fdes {
				for _, pc := range []uint64{d.begin, d.begin + (d.end-d.begin)/2, d.end - 1} {
					row, err := fr.RowAt(pc)
					if err != nil || row == nil {
						continue
					}
					var rs RegState
					rs.Set(RegRSP, 0x7000)
					rs.Set(RegRBP, 0x7010)
					if row.CFAExpr != nil {
						EvalExpr(row.CFAExpr, &rs, mem)
					}
					for _, r := range row.Regs {
						if r.Expr != nil {
							EvalExpr(r.Expr, &rs, mem, 0x7008)
						}
					}
				}
			}
		})
	})
}

// FuzzExpr: DWARF expressions evaluate or fail within a fixed heap bound,
// never panic or run away, and leave the registers alone. One that
// evaluates gives the same value with a DW_OP_nop after it, or moved behind
// a DW_OP_skip over junk (branches are relative), and its value plus k with
// DW_OP_plus_uconst k after it (but where the extra step is one too many).
func FuzzExpr(f *testing.F) {
	f.Add([]byte{0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}, uint8(3))
	f.Add([]byte{0x77, 0x10, 0x06, 0x23, 0x08}, uint8(0))
	f.Add([]byte{0x30, 0x28, 0x02, 0x00, 0x31, 0x2f, 0x01, 0x00, 0x32}, uint8(7))
	f.Fuzz(func(t *testing.T, expr []byte, k uint8) {
		var rs RegState
		rs.Set(RegRSP, 0x7000)
		rs.Set(RegRA, 0x1234)
		mem := dump{base: 0x7000, b: make([]byte, 64)}
		for i := range mem.b {
			mem.b[i] = byte(i)
		}
		eval := func(e []byte) (uint64, error) {
			before := rs
			v, err := EvalExpr(e, &rs, mem, 0x7008)
			if rs != before {
				t.Fatalf("evaluating %x changed the registers", e)
			}
			return v, err
		}
		var v uint64
		var err error
		if n := testutil.HeapBytes(func() { v, err = eval(expr) }); n > 4<<20 {
			t.Fatalf("evaluating %d bytes allocated %d", len(expr), n)
		}
		if err != nil {
			return
		}
		same := func(what string, e []byte, want uint64) {
			if got, err := eval(e); err != nil && !errors.Is(err, errExprTooLong) || err == nil && got != want {
				t.Fatalf("%x gives %#x; %s: %#x, %v", expr, v, what, got, err)
			}
		}
		same("with a nop after it", append(append([]byte(nil), expr...), 0x96), v)
		junk := []byte{0x2f, k, 0} // DW_OP_skip k
		for i := range int(k) {
			junk = append(junk, byte(i*37))
		}
		same(fmt.Sprintf("behind a skip over %d bytes", k), append(junk, expr...), v)
		same(fmt.Sprintf("plus_uconst %d after it", k&0x7f), append(append([]byte(nil), expr...), 0x23, k&0x7f), v+uint64(k&0x7f))
	})
}

// dump is memory holding b at base.
type dump struct {
	base uint64
	b    []byte
}

func (d dump) ReadAt(p []byte, addr uint64) (int, error) {
	if addr < d.base || addr-d.base >= uint64(len(d.b)) {
		return 0, errOutside
	}
	n := copy(p, d.b[addr-d.base:])
	if n < len(p) {
		return n, errOutside
	}
	return n, nil
}

var errOutside = os.ErrNotExist
