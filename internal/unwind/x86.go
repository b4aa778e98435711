package unwind

import (
	"encoding/binary"

	"golang.org/x/arch/x86/x86asm"
)

// What a walk proves of a return address it did not get from exact rules
// (the frame-pointer chain, its own fallback, a join of the two) is read
// from the code: the instruction that ends right before it must be a call,
// and a direct call must call the function of the frame below (or one
// that jumps there: a tail call, a compiler's cold part). This file is
// the small decoder of x86-64 call and branch encodings that needs, bounded
// by the bytes it is given: the code comes from the target. A call target's
// code is read whole by golang.org/x/arch's decoder (sweep).

type callKind uint8

const (
	notCall callKind = iota
	// directCall: E8 rel32; its target is known.
	directCall
	// indirectCall: FF /2 through a register or memory; its target is not.
	indirectCall
	// eitherCall: the bytes end both a direct and an indirect call,
	// depending on where the instruction starts: a call, target unknown.
	eitherCall
)

// maxInsn is the longest x86 instruction.
const maxInsn = 15

// callEndingAt says whether an x86-64 call instruction ends exactly at the
// end of b (b holds the bytes right before a return address, at most the
// last maxInsn of them are looked at), and for a direct call its rel32: the
// target is the return address plus rel. Every start from which the bytes
// decode as one call of exactly the remaining length counts; when both a
// direct and an indirect call fit, the kind is eitherCall.
func callEndingAt(b []byte) (kind callKind, rel int32) {
	if len(b) > maxInsn {
		b = b[len(b)-maxInsn:]
	}
	direct, indirect := false, false
	for start := 0; start+2 <= len(b); start++ {
		switch k, r := decodeCall(b[start:]); k {
		case directCall:
			direct, rel = true, r
		case indirectCall:
			indirect = true
		}
	}
	switch {
	case direct && indirect:
		return eitherCall, 0
	case direct:
		return directCall, rel
	case indirect:
		return indirectCall, 0
	}
	return notCall, 0
}

// decodeCall decodes b as exactly one call instruction: legacy prefixes
// (segment, operand and address size, bnd, notrack), an optional REX,
// then E8 rel32 or FF /2 with its ModRM, SIB and displacement.
func decodeCall(b []byte) (callKind, int32) {
	i := 0
	for i < len(b) && isLegacyPrefix(b[i]) {
		i++
	}
	rex := false
	if i < len(b) && b[i]&0xf0 == 0x40 {
		i, rex = i+1, true
	}
	if i >= len(b) {
		return notCall, 0
	}
	switch b[i] {
	case 0xe8:
		if rex || len(b)-i != 5 {
			return notCall, 0
		}
		return directCall, int32(binary.LittleEndian.Uint32(b[i+1:]))
	case 0xff:
		if i+1 >= len(b) || (b[i+1]>>3)&7 != 2 {
			return notCall, 0
		}
		if n, ok := modrmLen(b[i+1:]); ok && i+1+n == len(b) {
			return indirectCall, 0
		}
	}
	return notCall, 0
}

// isLegacyPrefix: the prefixes a call may carry (lock and rep are not
// valid on a call; 66 would make E8 a 16-bit call nobody emits, but is
// harmless on FF /2's memory forms).
func isLegacyPrefix(c byte) bool {
	switch c {
	case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x66, 0x67, 0xf2:
		return true
	}
	return false
}

// modrmLen is the length of a ModRM byte with its SIB and displacement,
// read from b[0] (64-bit addressing).
func modrmLen(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	mod, rm := b[0]>>6, b[0]&7
	n := 1
	if mod == 3 {
		return n, true
	}
	if rm == 4 {
		if len(b) < 2 {
			return 0, false
		}
		if mod == 0 && b[1]&7 == 5 {
			n += 4 // SIB with no base: disp32
		}
		n++
	}
	switch {
	case mod == 0 && rm == 5:
		n += 4 // RIP-relative disp32
	case mod == 1:
		n++
	case mod == 2:
		n += 4
	}
	return n, true
}

// branches is what a function's code branches to, found by decoding it
// from its entry to its end (a linear sweep: compilers put no data
// between a function's instructions), with golang.org/x/arch's decoder:
// the lengths of every x86-64 instruction are needed to know where the
// next one starts.
type branches struct {
	// complete: every byte decoded; otherwise nothing is known.
	complete bool
	// calls are the direct calls: each one's target and return address.
	calls []branch
	// jumps are the targets of direct jumps, conditional or not.
	jumps []uint64
	// indirect: the code jumps through a register or memory (a tail call
	// of a function pointer, a switch's jump table): it may reach any
	// function.
	indirect bool
}

// branch is a direct call: its target, its return address, and the
// addresses the code before it (since the previous call) takes with a
// RIP-relative LEA: what it passes, such as a closure for
// runtime.systemstack to call.
type branch struct {
	target, ret uint64
	leas        []uint64
}

// maxLeas bounds the addresses kept per call.
const maxLeas = 8

// maxBranches bounds what one function's sweep keeps.
const maxBranches = 4096

// sweep decodes code loaded at base.
func sweep(code []byte, base uint64) *branches {
	b := &branches{complete: true}
	var leas []uint64
	for i := 0; i < len(code); {
		inst, err := x86asm.Decode(code[i:], 64)
		if err != nil || inst.Len == 0 {
			if code[i] == 0xcc || code[i] == 0x00 {
				i++ // padding between functions
				continue
			}
			b.complete = false
			return b
		}
		next := base + uint64(i+inst.Len)
		switch op := inst.Op; {
		case op == x86asm.LEA:
			if m, ok := inst.Args[1].(x86asm.Mem); ok && m.Base == x86asm.RIP && m.Index == 0 && len(leas) < maxLeas {
				leas = append(leas, next+uint64(m.Disp))
			}
		case op == x86asm.CALL || op == x86asm.JMP || isJcc(op):
			if rel, ok := inst.Args[0].(x86asm.Rel); ok {
				target := next + uint64(int64(rel))
				if op == x86asm.CALL {
					b.calls = append(b.calls, branch{target, next, leas})
					leas = nil
				} else {
					b.jumps = append(b.jumps, target)
				}
			} else if op == x86asm.JMP {
				b.indirect = true
			}
		}
		if len(b.calls)+len(b.jumps) > maxBranches {
			b.complete = false
			return b
		}
		i += inst.Len
	}
	return b
}

func isJcc(op x86asm.Op) bool {
	switch op {
	case x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG, x86asm.JGE, x86asm.JL, x86asm.JLE,
		x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO, x86asm.JP, x86asm.JS,
		x86asm.JCXZ, x86asm.JECXZ, x86asm.JRCXZ, x86asm.LOOP, x86asm.LOOPE, x86asm.LOOPNE:
		return true
	}
	return false
}

// into says how the swept function reaches the function at [lo, hi): by
// a jump into it (or through a register: possibly), and its calls of lo.
func (b *branches) into(lo, hi uint64) (calls []branch, jumps bool) {
	for _, c := range b.calls {
		if c.target == lo {
			calls = append(calls, c)
		}
	}
	for _, j := range b.jumps {
		if j >= lo && j < hi {
			return calls, true
		}
	}
	return calls, b.indirect
}
