package unwind

import "fmt"

// x86-64 DWARF register numbers (System V ABI, figure 3.36).
const (
	regRBX = 3
	regRBP = 6
	regRSP = 7
	regR12 = 12
	regR15 = 15
	regRA  = 16 // the return address column
	// numRegs covers the general registers and the return address; rules
	// for vector registers are parsed and dropped.
	numRegs = 17
)

var regNames = [numRegs]string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}

func regName(r uint64) string {
	if r < numRegs {
		return regNames[r]
	}
	return fmt.Sprintf("r%d", r)
}

// calleeSaved are the registers a function must preserve: with no rule,
// their value in the caller is their value here.
func calleeSaved(r int) bool {
	return r == regRBX || r == regRBP || (r >= regR12 && r <= regR15)
}

type ruleKind uint8

const (
	ruleUnset     ruleKind = iota // no instruction mentioned it
	ruleUndefined                 // not recoverable (for the RA: the outermost frame)
	ruleSame                      // unchanged
	ruleOffset                    // saved at CFA+off
	ruleValOffset                 // value is CFA+off
	ruleRegister                  // in register reg
	ruleExpr                      // saved at the address expr computes
	ruleValExpr                   // value is what expr computes
)

type rule struct {
	kind ruleKind
	reg  uint8
	off  int64
	expr []byte
}

// row is the unwind rules in force at one instruction.
type row struct {
	cfaReg  uint64
	cfaOff  int64
	cfaExpr []byte // non-nil: DW_CFA_def_cfa_expression
	regs    [numRegs]rule
}

// rowResult is a cached answer for one lookup address.
type rowResult struct {
	row     row
	signal  bool
	fnStart uint64 // link-time start of the FDE's range: the function
}

// DWARF call frame instructions (DWARF 5, section 6.4.2).
const (
	cfaAdvanceLoc        = 0x40
	cfaOffset            = 0x80
	cfaRestore           = 0xc0
	cfaNop               = 0x00
	cfaSetLoc            = 0x01
	cfaAdvanceLoc1       = 0x02
	cfaAdvanceLoc2       = 0x03
	cfaAdvanceLoc4       = 0x04
	cfaOffsetExtended    = 0x05
	cfaRestoreExtended   = 0x06
	cfaUndefined         = 0x07
	cfaSameValue         = 0x08
	cfaRegister          = 0x09
	cfaRememberState     = 0x0a
	cfaRestoreState      = 0x0b
	cfaDefCfa            = 0x0c
	cfaDefCfaRegister    = 0x0d
	cfaDefCfaOffset      = 0x0e
	cfaDefCfaExpression  = 0x0f
	cfaExpression        = 0x10
	cfaOffsetExtendedSf  = 0x11
	cfaDefCfaSf          = 0x12
	cfaDefCfaOffsetSf    = 0x13
	cfaValOffset         = 0x14
	cfaValOffsetSf       = 0x15
	cfaValExpression     = 0x16
	cfaGNUWindowSave     = 0x2d
	cfaGNUArgsSize       = 0x2e
	cfaGNUNegOffsetExtnd = 0x2f
)

// maxStateStack bounds DW_CFA_remember_state nesting.
const maxStateStack = 64

// cfaMachine runs call frame instructions up to a target address.
type cfaMachine struct {
	c       *cie
	name    string
	initial row // the row after the CIE's instructions (for restore)
	cur     row
	loc     uint64
	stack   []row
}

// rowFor computes the rules at the link-time address pc inside d.
func rowFor(name string, d *fde, pc uint64) (row, error) {
	m := &cfaMachine{c: d.cie, name: name}
	if err := m.run(d.cie.initial, ^uint64(0), true); err != nil {
		return row{}, fmt.Errorf("CIE of FDE at %#x: %w", d.off, err)
	}
	m.initial = m.cur
	m.loc = d.begin
	if err := m.run(d.program, pc, false); err != nil {
		return row{}, fmt.Errorf("FDE at %#x: %w", d.off, err)
	}
	return m.cur, nil
}

// run executes prog until the location passes pc. In the CIE's initial
// instructions there are no locations to pass.
func (m *cfaMachine) run(prog []byte, pc uint64, initial bool) error {
	r := &ebuf{b: prog, name: m.name}
	setRule := func(reg uint64, ru rule) {
		if reg < numRegs {
			m.cur.regs[reg] = ru
		}
	}
	offsetRule := func(reg uint64, off int64) { setRule(reg, rule{kind: ruleOffset, off: off}) }
	advance := func(delta uint64) bool {
		next := m.loc + delta*m.c.codeAlign
		if !initial && next > pc {
			return false
		}
		m.loc = next
		return true
	}
	for r.off < len(prog) && r.err == nil {
		op := r.u8()
		switch op & 0xc0 {
		case cfaAdvanceLoc:
			if !advance(uint64(op & 0x3f)) {
				return nil
			}
			continue
		case cfaOffset:
			offsetRule(uint64(op&0x3f), int64(r.uleb())*m.c.dataAlign)
			continue
		case cfaRestore:
			if reg := uint64(op & 0x3f); reg < numRegs {
				m.cur.regs[reg] = m.initial.regs[reg]
			}
			continue
		}
		switch op {
		case cfaNop:
		case cfaSetLoc:
			loc := r.pointer(m.c.fdeEnc, 0, 0)
			if r.err == nil && m.c.fdeEnc&0x70 == pePcrel {
				return fmt.Errorf("offset %#x: DW_CFA_set_loc with a pc-relative encoding is not supported", r.off)
			}
			if !initial && loc > pc {
				return nil
			}
			m.loc = loc
		case cfaAdvanceLoc1:
			if !advance(uint64(r.u8())) {
				return nil
			}
		case cfaAdvanceLoc2:
			if !advance(uint64(r.u16())) {
				return nil
			}
		case cfaAdvanceLoc4:
			if !advance(uint64(r.u32())) {
				return nil
			}
		case cfaOffsetExtended:
			reg := r.uleb()
			offsetRule(reg, int64(r.uleb())*m.c.dataAlign)
		case cfaOffsetExtendedSf:
			reg := r.uleb()
			offsetRule(reg, r.sleb()*m.c.dataAlign)
		case cfaGNUNegOffsetExtnd:
			reg := r.uleb()
			offsetRule(reg, -int64(r.uleb())*m.c.dataAlign)
		case cfaRestoreExtended:
			if reg := r.uleb(); reg < numRegs {
				m.cur.regs[reg] = m.initial.regs[reg]
			}
		case cfaUndefined:
			setRule(r.uleb(), rule{kind: ruleUndefined})
		case cfaSameValue:
			setRule(r.uleb(), rule{kind: ruleSame})
		case cfaRegister:
			reg, from := r.uleb(), r.uleb()
			if from >= numRegs {
				setRule(reg, rule{kind: ruleUndefined})
			} else {
				setRule(reg, rule{kind: ruleRegister, reg: uint8(from)})
			}
		case cfaRememberState:
			if len(m.stack) >= maxStateStack {
				return fmt.Errorf("offset %#x: DW_CFA_remember_state nested deeper than %d", r.off, maxStateStack)
			}
			m.stack = append(m.stack, m.cur)
		case cfaRestoreState:
			if len(m.stack) == 0 {
				return fmt.Errorf("offset %#x: DW_CFA_restore_state with nothing remembered", r.off)
			}
			// The CFA rule is part of the state too (DWARF 5 6.4.2.4).
			m.cur = m.stack[len(m.stack)-1]
			m.stack = m.stack[:len(m.stack)-1]
		case cfaDefCfa:
			m.cur.cfaReg = r.uleb()
			m.cur.cfaOff = int64(r.uleb())
			m.cur.cfaExpr = nil
		case cfaDefCfaSf:
			m.cur.cfaReg = r.uleb()
			m.cur.cfaOff = r.sleb() * m.c.dataAlign
			m.cur.cfaExpr = nil
		case cfaDefCfaRegister:
			m.cur.cfaReg = r.uleb()
			m.cur.cfaExpr = nil
		case cfaDefCfaOffset:
			m.cur.cfaOff = int64(r.uleb())
		case cfaDefCfaOffsetSf:
			m.cur.cfaOff = r.sleb() * m.c.dataAlign
		case cfaDefCfaExpression:
			m.cur.cfaExpr = r.bytes(r.uleb())
			if m.cur.cfaExpr == nil {
				m.cur.cfaExpr = []byte{}
			}
		case cfaExpression:
			reg := r.uleb()
			setRule(reg, rule{kind: ruleExpr, expr: r.bytes(r.uleb())})
		case cfaValExpression:
			reg := r.uleb()
			setRule(reg, rule{kind: ruleValExpr, expr: r.bytes(r.uleb())})
		case cfaValOffset:
			reg := r.uleb()
			setRule(reg, rule{kind: ruleValOffset, off: int64(r.uleb()) * m.c.dataAlign})
		case cfaValOffsetSf:
			reg := r.uleb()
			setRule(reg, rule{kind: ruleValOffset, off: r.sleb() * m.c.dataAlign})
		case cfaGNUArgsSize:
			r.uleb() // stack adjustment for exception landing pads
		case cfaGNUWindowSave:
			// SPARC / AArch64 pointer authentication: nothing on x86-64.
		default:
			return fmt.Errorf("offset %#x: unknown call frame instruction %#x", r.off-1, op)
		}
	}
	if r.err != nil {
		return r.err
	}
	return nil
}

// rowAt returns the rules at the link-time address pc, cached per address
// (most threads of a process wait at the same few places).
func (f *ehFrame) rowAt(pc uint64) (*rowResult, error) {
	f.mu.Lock()
	rr, ok := f.rows[pc]
	f.mu.Unlock()
	if ok {
		return rr, nil
	}
	d, err := f.find(pc)
	if err != nil {
		return nil, err
	}
	if d != nil {
		rw, err := rowFor(f.name, d, pc)
		if err != nil {
			return nil, err
		}
		rr = &rowResult{row: rw, signal: d.cie.signal, fnStart: d.begin}
	}
	f.mu.Lock()
	if f.rows == nil || len(f.rows) >= maxCachedRows {
		f.rows = make(map[uint64]*rowResult)
	}
	f.rows[pc] = rr
	f.mu.Unlock()
	return rr, nil
}

// maxCachedRows bounds the per-module cache of computed rows.
const maxCachedRows = 1 << 14
