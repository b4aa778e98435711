package callframe

import "fmt"

// x86-64 DWARF register numbers (System V ABI, figure 3.36).
const (
	RegRBX = 3
	RegRBP = 6
	RegRSP = 7
	RegR12 = 12
	RegR15 = 15
	RegRA  = 16 // the return address column
	// NumRegs covers the general registers and the return address; rules
	// for vector registers are parsed and dropped.
	NumRegs = 17
)

var regNames = [NumRegs]string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
	"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}

// RegName names a DWARF register number.
func RegName(r uint64) string {
	if r < NumRegs {
		return regNames[r]
	}
	return fmt.Sprintf("r%d", r)
}

// CalleeSaved reports whether a function must preserve register r: with
// no rule, its value in the caller is its value here.
func CalleeSaved(r int) bool {
	return r == RegRBX || r == RegRBP || (r >= RegR12 && r <= RegR15)
}

// RuleKind says how a register of the caller is recovered.
type RuleKind uint8

const (
	RuleUnset     RuleKind = iota // no instruction mentioned it
	RuleUndefined                 // not recoverable (for the RA: the outermost frame)
	RuleSame                      // unchanged
	RuleOffset                    // saved at CFA+Off
	RuleValOffset                 // value is CFA+Off
	RuleRegister                  // in register Reg
	RuleExpr                      // saved at the address Expr computes
	RuleValExpr                   // value is what Expr computes
)

// Rule recovers one register of the caller.
type Rule struct {
	Kind RuleKind
	Reg  uint8
	Off  int64
	Expr []byte
}

// Rules are the unwind rules in force at one instruction.
type Rules struct {
	CFAReg  uint64
	CFAOff  int64
	CFAExpr []byte // non-nil: DW_CFA_def_cfa_expression
	Regs    [NumRegs]Rule
}

// Row is the answer for one address: its rules, whether its frames are
// signal trampolines (the CIE's 'S'), and the start of the function (the
// FDE's range).
type Row struct {
	Rules
	Signal  bool
	FnStart uint64 // link-time
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
	initial Rules // the row after the CIE's instructions (for restore)
	cur     Rules
	loc     uint64
	stack   []Rules
}

// rowFor computes the rules at the link-time address pc inside d.
func rowFor(name string, d *fde, pc uint64) (Rules, error) {
	m := &cfaMachine{c: d.cie, name: name}
	if err := m.run(d.cie.initial, ^uint64(0), true); err != nil {
		return Rules{}, fmt.Errorf("CIE of FDE at %#x: %w", d.off, err)
	}
	m.initial = m.cur
	m.loc = d.begin
	if err := m.run(d.program, pc, false); err != nil {
		return Rules{}, fmt.Errorf("FDE at %#x: %w", d.off, err)
	}
	return m.cur, nil
}

// run executes prog until the location passes pc. In the CIE's initial
// instructions there are no locations to pass.
func (m *cfaMachine) run(prog []byte, pc uint64, initial bool) error {
	r := &ebuf{b: prog, name: m.name}
	setRule := func(reg uint64, ru Rule) {
		if reg < NumRegs {
			m.cur.Regs[reg] = ru
		}
	}
	offsetRule := func(reg uint64, off int64) { setRule(reg, Rule{Kind: RuleOffset, Off: off}) }
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
			if reg := uint64(op & 0x3f); reg < NumRegs {
				m.cur.Regs[reg] = m.initial.Regs[reg]
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
			if reg := r.uleb(); reg < NumRegs {
				m.cur.Regs[reg] = m.initial.Regs[reg]
			}
		case cfaUndefined:
			setRule(r.uleb(), Rule{Kind: RuleUndefined})
		case cfaSameValue:
			setRule(r.uleb(), Rule{Kind: RuleSame})
		case cfaRegister:
			reg, from := r.uleb(), r.uleb()
			if from >= NumRegs {
				setRule(reg, Rule{Kind: RuleUndefined})
			} else {
				setRule(reg, Rule{Kind: RuleRegister, Reg: uint8(from)})
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
			m.cur.CFAReg = r.uleb()
			m.cur.CFAOff = int64(r.uleb())
			m.cur.CFAExpr = nil
		case cfaDefCfaSf:
			m.cur.CFAReg = r.uleb()
			m.cur.CFAOff = r.sleb() * m.c.dataAlign
			m.cur.CFAExpr = nil
		case cfaDefCfaRegister:
			m.cur.CFAReg = r.uleb()
			m.cur.CFAExpr = nil
		case cfaDefCfaOffset:
			m.cur.CFAOff = int64(r.uleb())
		case cfaDefCfaOffsetSf:
			m.cur.CFAOff = r.sleb() * m.c.dataAlign
		case cfaDefCfaExpression:
			m.cur.CFAExpr = r.bytes(r.uleb())
			if m.cur.CFAExpr == nil {
				m.cur.CFAExpr = []byte{}
			}
		case cfaExpression:
			reg := r.uleb()
			setRule(reg, Rule{Kind: RuleExpr, Expr: r.bytes(r.uleb())})
		case cfaValExpression:
			reg := r.uleb()
			setRule(reg, Rule{Kind: RuleValExpr, Expr: r.bytes(r.uleb())})
		case cfaValOffset:
			reg := r.uleb()
			setRule(reg, Rule{Kind: RuleValOffset, Off: int64(r.uleb()) * m.c.dataAlign})
		case cfaValOffsetSf:
			reg := r.uleb()
			setRule(reg, Rule{Kind: RuleValOffset, Off: r.sleb() * m.c.dataAlign})
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

// RowAt returns the rules at the link-time address pc, nil when no FDE
// covers it. Rows are cached per address (most threads of a process wait
// at the same few places).
func (f *Table) RowAt(pc uint64) (*Row, error) {
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
		rr = &Row{Rules: rw, Signal: d.cie.signal, FnStart: d.begin}
	}
	f.mu.Lock()
	if f.rows == nil || len(f.rows) >= maxCachedRows {
		f.rows = make(map[uint64]*Row)
	}
	f.rows[pc] = rr
	f.mu.Unlock()
	return rr, nil
}

// maxCachedRows bounds the per-module cache of computed rows.
const maxCachedRows = 1 << 14
