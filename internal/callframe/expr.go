package callframe

import (
	"encoding/binary"
	"fmt"
)

// RegState is the register file of a frame being unwound: a value and
// whether it is known, per DWARF register.
type RegState struct {
	v     [NumRegs]uint64
	known uint32
}

// Get returns register r and whether it is known.
func (s *RegState) Get(r uint64) (uint64, bool) {
	if r >= NumRegs || s.known&(1<<r) == 0 {
		return 0, false
	}
	return s.v[r], true
}

// Set makes register r known with value v.
func (s *RegState) Set(r uint64, v uint64) {
	if r < NumRegs {
		s.v[r] = v
		s.known |= 1 << r
	}
}

// Known is the set of registers known, bit r for register r.
func (s *RegState) Known() uint32 { return s.known }

// Narrow forgets every register not in m (bit r for register r), in
// place: an unwinder building a caller's registers from its callee's
// keeps what the caller shares with it without copying the rest.
func (s *RegState) Narrow(m uint32) { s.known &= m }

// Memory is what an expression dereferences: the target's memory (see
// package internal/unwind). A short read is returned with an error.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

func readU64(mem Memory, addr uint64) (uint64, bool) {
	var b [8]byte
	if _, err := mem.ReadAt(b[:], addr); err != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint64(b[:]), true
}

// Limits of the expression evaluator: CFI expressions are a few
// operations long (the PLT's is nine); these only stop hostile input.
const (
	maxExprSteps = 256
	maxExprStack = 64
)

// errExprTooLong is a hostile (or looping) expression, stopped.
var errExprTooLong = fmt.Errorf("expression runs longer than %d steps", maxExprSteps)

// EvalExpr evaluates a DWARF expression from call frame information, with
// initial pushed first (the CFA, for register rules). Only what CFI may
// use is supported: no register locations, no calls, no TLS.
func EvalExpr(expr []byte, regs *RegState, mem Memory, initial ...uint64) (uint64, error) {
	stack := make([]uint64, 0, 8)
	stack = append(stack, initial...)
	r := &ebuf{b: expr, name: "expression"}
	pop := func() (uint64, bool) {
		if len(stack) == 0 {
			return 0, false
		}
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return v, true
	}
	for steps := 0; r.off < len(expr); steps++ {
		if steps >= maxExprSteps {
			return 0, errExprTooLong
		}
		if len(stack) > maxExprStack {
			return 0, fmt.Errorf("expression stack deeper than %d", maxExprStack)
		}
		opOff := r.off
		op := r.u8()
		switch {
		case op >= 0x30 && op <= 0x4f: // DW_OP_lit0..31
			stack = append(stack, uint64(op-0x30))
			continue
		case op >= 0x70 && op <= 0x8f: // DW_OP_breg0..31
			reg := uint64(op - 0x70)
			off := r.sleb()
			v, ok := regs.Get(reg)
			if !ok {
				return 0, fmt.Errorf("expression reads %s, which is unknown", RegName(reg))
			}
			stack = append(stack, v+uint64(off))
			continue
		}
		switch op {
		case 0x03: // DW_OP_addr
			stack = append(stack, r.u64())
		case 0x06: // DW_OP_deref
			a, ok := pop()
			if !ok {
				return 0, errUnderflow(opOff)
			}
			v, ok := readU64(mem, a)
			if !ok {
				return 0, fmt.Errorf("expression dereferences %#x, which is not readable", a)
			}
			stack = append(stack, v)
		case 0x94: // DW_OP_deref_size
			n := int(r.u8())
			a, ok := pop()
			if !ok {
				return 0, errUnderflow(opOff)
			}
			if n < 1 || n > 8 {
				return 0, fmt.Errorf("expression offset %d: DW_OP_deref_size %d", opOff, n)
			}
			var b [8]byte
			if _, err := mem.ReadAt(b[:n], a); err != nil {
				return 0, fmt.Errorf("expression dereferences %#x, which is not readable", a)
			}
			stack = append(stack, binary.LittleEndian.Uint64(b[:]))
		case 0x08:
			stack = append(stack, uint64(r.u8()))
		case 0x09:
			stack = append(stack, uint64(int64(int8(r.u8()))))
		case 0x0a:
			stack = append(stack, uint64(r.u16()))
		case 0x0b:
			stack = append(stack, uint64(int64(int16(r.u16()))))
		case 0x0c:
			stack = append(stack, uint64(r.u32()))
		case 0x0d:
			stack = append(stack, uint64(int64(int32(r.u32()))))
		case 0x0e, 0x0f:
			stack = append(stack, r.u64())
		case 0x10: // DW_OP_constu
			stack = append(stack, r.uleb())
		case 0x11: // DW_OP_consts
			stack = append(stack, uint64(r.sleb()))
		case 0x12: // DW_OP_dup
			if len(stack) < 1 {
				return 0, errUnderflow(opOff)
			}
			stack = append(stack, stack[len(stack)-1])
		case 0x13: // DW_OP_drop
			if _, ok := pop(); !ok {
				return 0, errUnderflow(opOff)
			}
		case 0x14: // DW_OP_over
			if len(stack) < 2 {
				return 0, errUnderflow(opOff)
			}
			stack = append(stack, stack[len(stack)-2])
		case 0x15: // DW_OP_pick
			i := int(r.u8())
			if i >= len(stack) {
				return 0, errUnderflow(opOff)
			}
			stack = append(stack, stack[len(stack)-1-i])
		case 0x16: // DW_OP_swap
			if len(stack) < 2 {
				return 0, errUnderflow(opOff)
			}
			n := len(stack)
			stack[n-1], stack[n-2] = stack[n-2], stack[n-1]
		case 0x17: // DW_OP_rot
			if len(stack) < 3 {
				return 0, errUnderflow(opOff)
			}
			n := len(stack)
			stack[n-1], stack[n-2], stack[n-3] = stack[n-2], stack[n-3], stack[n-1]
		case 0x19: // DW_OP_abs
			if len(stack) < 1 {
				return 0, errUnderflow(opOff)
			}
			if v := int64(stack[len(stack)-1]); v < 0 {
				stack[len(stack)-1] = uint64(-v)
			}
		case 0x1f: // DW_OP_neg
			if len(stack) < 1 {
				return 0, errUnderflow(opOff)
			}
			stack[len(stack)-1] = uint64(-int64(stack[len(stack)-1]))
		case 0x20: // DW_OP_not
			if len(stack) < 1 {
				return 0, errUnderflow(opOff)
			}
			stack[len(stack)-1] = ^stack[len(stack)-1]
		case 0x23: // DW_OP_plus_uconst
			if len(stack) < 1 {
				return 0, errUnderflow(opOff)
			}
			stack[len(stack)-1] += r.uleb()
		case 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x21, 0x22, 0x24, 0x25, 0x26, 0x27,
			0x29, 0x2a, 0x2b, 0x2c, 0x2d, 0x2e:
			b, ok1 := pop()
			a, ok2 := pop()
			if !ok1 || !ok2 {
				return 0, errUnderflow(opOff)
			}
			v, err := binop(op, a, b)
			if err != nil {
				return 0, fmt.Errorf("expression offset %d: %w", opOff, err)
			}
			stack = append(stack, v)
		case 0x2f, 0x28: // DW_OP_skip, DW_OP_bra
			delta := int(int16(r.u16()))
			if op == 0x28 {
				v, ok := pop()
				if !ok {
					return 0, errUnderflow(opOff)
				}
				if v == 0 {
					continue
				}
			}
			to := r.off + delta
			if to < 0 || to > len(expr) {
				return 0, fmt.Errorf("expression offset %d: branch to %d outside the expression", opOff, to)
			}
			r.off = to
		case 0x92: // DW_OP_bregx
			reg := r.uleb()
			off := r.sleb()
			v, ok := regs.Get(reg)
			if !ok {
				return 0, fmt.Errorf("expression reads %s, which is unknown", RegName(reg))
			}
			stack = append(stack, v+uint64(off))
		case 0x96: // DW_OP_nop
		default:
			if r.err != nil {
				break
			}
			return 0, fmt.Errorf("expression offset %d: operation %#x is not supported in call frame information", opOff, op)
		}
		if r.err != nil {
			return 0, r.err
		}
	}
	if r.err != nil {
		return 0, r.err
	}
	if len(stack) > maxExprStack {
		return 0, fmt.Errorf("expression stack deeper than %d", maxExprStack)
	}
	v, ok := pop()
	if !ok {
		return 0, fmt.Errorf("expression leaves no value")
	}
	return v, nil
}

func errUnderflow(off int) error {
	return fmt.Errorf("expression offset %d: stack underflow", off)
}

func binop(op byte, a, b uint64) (uint64, error) {
	bool2 := func(c bool) uint64 {
		if c {
			return 1
		}
		return 0
	}
	switch op {
	case 0x1a:
		return a & b, nil
	case 0x1b:
		if b == 0 {
			return 0, fmt.Errorf("division by zero")
		}
		if int64(b) == -1 {
			return uint64(-int64(a)), nil
		}
		return uint64(int64(a) / int64(b)), nil
	case 0x1c:
		return a - b, nil
	case 0x1d:
		if b == 0 {
			return 0, fmt.Errorf("modulo by zero")
		}
		return a % b, nil
	case 0x1e:
		return a * b, nil
	case 0x21:
		return a | b, nil
	case 0x22:
		return a + b, nil
	case 0x24:
		if b >= 64 {
			return 0, nil
		}
		return a << b, nil
	case 0x25:
		if b >= 64 {
			return 0, nil
		}
		return a >> b, nil
	case 0x26:
		if b >= 64 {
			b = 63
		}
		return uint64(int64(a) >> b), nil
	case 0x27:
		return a ^ b, nil
	case 0x29:
		return bool2(a == b), nil
	case 0x2a:
		return bool2(int64(a) >= int64(b)), nil
	case 0x2b:
		return bool2(int64(a) > int64(b)), nil
	case 0x2c:
		return bool2(int64(a) <= int64(b)), nil
	case 0x2d:
		return bool2(int64(a) < int64(b)), nil
	case 0x2e:
		return bool2(a != b), nil
	}
	return 0, fmt.Errorf("operation %#x", op)
}
