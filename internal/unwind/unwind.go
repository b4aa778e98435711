package unwind

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Regs are the registers a walk starts from (x86-64: rip, rsp, rbp). BP is
// only trusted when BPKnown: a thread blocked in the kernel exposes its
// instruction and stack pointers in /proc, but not its frame pointer.
type Regs struct {
	IP, SP, BP uint64
	BPKnown    bool
}

// Memory reads the target's memory. A short read is returned with an error.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// Unwinder walks a stack: the result holds regs.IP first, then the return
// address of each caller as found (not adjusted), at most max entries.
type Unwinder interface {
	Unwind(regs Regs, mem Memory, max int) []uint64
}

// ErrUnmapped is returned by memories for addresses they do not hold.
var ErrUnmapped = errors.New("address not readable")

// DumpMemory serves reads from a copy of the target's memory that began at
// base, such as the user stack a perf sample copied from its stack pointer
// (PERF_SAMPLE_STACK_USER). Reads outside it fail with ErrUnmapped; a
// walk reading past its end says the copy was too small (CopyExhausted).
func DumpMemory(base uint64, b []byte) Memory { return &dumpMemory{base: base, b: b} }

type dumpMemory struct {
	base uint64
	b    []byte
}

// errPastCopy is a read past the end of a stack copy: unmapped as far as
// the copy knows, and a sign that the copy was too small.
var errPastCopy = fmt.Errorf("%w: %w", errOutsideCopy, ErrUnmapped)

// word reads 8 bytes at addr.
func (d *dumpMemory) word(addr uint64) (uint64, error) {
	if addr < d.base {
		return 0, ErrUnmapped
	}
	if off := addr - d.base; off < uint64(len(d.b)) && uint64(len(d.b))-off >= 8 {
		return binary.LittleEndian.Uint64(d.b[off:]), nil
	}
	return 0, errPastCopy
}

func (d *dumpMemory) ReadAt(p []byte, addr uint64) (int, error) {
	if addr < d.base {
		return 0, ErrUnmapped
	}
	if addr-d.base >= uint64(len(d.b)) {
		return 0, errPastCopy
	}
	n := copy(p, d.b[addr-d.base:])
	if n < len(p) {
		return n, errPastCopy
	}
	return n, nil
}

// Fallback reads from first and, where first does not hold an address,
// from second: a stack copied during a ptrace stop, then the live process
// for what lies beyond the copy.
func Fallback(first, second Memory) Memory { return fallbackMemory{first, second} }

type fallbackMemory struct{ first, second Memory }

func (f fallbackMemory) ReadAt(p []byte, addr uint64) (int, error) {
	if n, err := f.first.ReadAt(p, addr); err == nil {
		return n, nil
	}
	return f.second.ReadAt(p, addr)
}

func readU64(mem Memory, addr uint64) (uint64, bool) {
	v, err := readWord(mem, addr)
	return v, err == nil
}

func readWord(mem Memory, addr uint64) (uint64, error) {
	if d, ok := mem.(*dumpMemory); ok {
		return d.word(addr) // without the allocation of b below
	}
	var b [8]byte
	if _, err := mem.ReadAt(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// Method says how a frame's program counter was found.
type Method uint8

const (
	// Registers: the walk's starting instruction pointer.
	Registers Method = iota
	// CFI: the callee's frame was unwound with its DWARF call frame rules.
	CFI
	// FramePointerChain: the callee's saved frame pointer and return
	// address were followed.
	FramePointerChain
	// Scanned: the callee needed a frame pointer nobody knew, and it was
	// found by scanning the stack for a saved-frame-pointer / return
	// address pair. Validated, but a heuristic.
	Scanned
	// Leaf: the callee had no frame rules and the return address was
	// taken from the top of the stack (a frameless leaf function).
	Leaf
	// GoTable: the callee was Go code, unwound with the frame sizes of
	// its binary's pclntab, as Go's own traceback does.
	GoTable
)

func (m Method) String() string {
	switch m {
	case Registers:
		return "regs"
	case CFI:
		return "cfi"
	case FramePointerChain:
		return "fp"
	case Scanned:
		return "scan"
	case Leaf:
		return "leaf"
	case GoTable:
		return "gopclntab"
	}
	return fmt.Sprintf("method(%d)", uint8(m))
}

// Trace is a walk's result with how each frame was found.
type Trace struct {
	// PCs holds the starting instruction pointer, then return addresses.
	PCs []uint64
	// How[i] says how PCs[i] was found.
	How []Method
	// Exact[i] says PCs[i] is the address of the next instruction to run
	// rather than a return address: the starting IP, a signal
	// trampoline's entry (the handler "returns" there, no call pushed
	// it), and the instruction a signal interrupted. Symbolizers look up
	// return addresses minus one, and exact addresses as they are.
	Exact []bool
	// FPs[i] is the frame pointer (rbp) of the frame PCs[i] runs in, 0
	// where the walk did not know it: a runtime that keeps its own frame
	// records beside the frame pointer (V8's function slot below it) is
	// read from there.
	FPs []uint64
	// Cut says why the walk stopped: Complete when the outermost frame's
	// rules said so, otherwise the reason it could go no further.
	Cut Cut
}

// Methods summarizes How: "cfi", "cfi+fp", "fp+scan", ...
func (t Trace) Methods() string {
	var seen [GoTable + 1]bool
	s := ""
	for _, m := range t.How {
		if m == Registers || int(m) >= len(seen) || seen[m] {
			continue
		}
		seen[m] = true
	}
	for _, m := range []Method{CFI, GoTable, FramePointerChain, Leaf, Scanned} {
		if seen[m] {
			if s != "" {
				s += "+"
			}
			s += m.String()
		}
	}
	if s == "" {
		return "pc only"
	}
	return s
}

func (t *Trace) push(pc uint64, how Method, fp uint64) {
	t.PCs = append(t.PCs, pc)
	t.How = append(t.How, how)
	t.Exact = append(t.Exact, how == Registers)
	t.FPs = append(t.FPs, fp)
}

// FramePointer returns the unwinder that follows the frame-pointer chain
// only, as the kernel's perf callchains do.
func FramePointer() Unwinder { return fpUnwinder{} }

type fpUnwinder struct{}

func (fpUnwinder) Unwind(regs Regs, mem Memory, max int) []uint64 {
	return walkFP(regs, mem, max).PCs
}

func walkFP(regs Regs, mem Memory, max int) Trace {
	var t Trace
	if max <= 0 {
		return t
	}
	t.push(regs.IP, Registers, knownBP(regs))
	if !regs.BPKnown {
		t.Cut = Cut{Reason: NoUnwindInfo, PC: regs.IP}
		return t
	}
	bp, sp := regs.BP, regs.SP
	for len(t.PCs) < max {
		next, err := fpLink(func(a uint64) (uint64, error) { return readWord(mem, a) }, bp, sp)
		if err != nil {
			t.Cut = Cut{Reason: NoUnwindInfo, PC: t.PCs[len(t.PCs)-1]}
			if errors.Is(err, errOutsideCopy) {
				t.Cut.Reason = CopyExhausted
			}
			return t
		}
		t.push(next.ip, FramePointerChain, next.bp)
		bp, sp = next.bp, next.sp
	}
	t.Cut = Cut{Reason: TooDeep, Limit: max}
	return t
}

// knownBP is regs' frame pointer, 0 when it is not known.
func knownBP(regs Regs) uint64 {
	if regs.BPKnown {
		return regs.BP
	}
	return 0
}

type fpFrame struct{ ip, sp, bp uint64 }

// errNoFrame is a frame pointer that does not point at a frame record.
var errNoFrame = errors.New("no frame record")

// fpLink follows one link of the frame-pointer chain: [bp] is the
// caller's frame pointer and [bp+8] the return address. The chain must
// climb the stack (a frame lies above the frames it called), which also
// bounds it.
func fpLink(read func(addr uint64) (uint64, error), bp, sp uint64) (fpFrame, error) {
	if bp == 0 || bp < sp || bp&7 != 0 || bp > 1<<63 {
		return fpFrame{}, errNoFrame
	}
	savedBP, err := read(bp)
	if err != nil {
		return fpFrame{}, err
	}
	ra, err := read(bp + 8)
	if err != nil {
		return fpFrame{}, err
	}
	if ra == 0 {
		return fpFrame{}, errNoFrame
	}
	if savedBP != 0 && savedBP <= bp {
		// Some frame reused rbp; the return address at bp+8 is still
		// this frame's, but no caller beyond it can be trusted.
		return fpFrame{ip: ra, sp: bp + 16, bp: 0}, nil
	}
	return fpFrame{ip: ra, sp: bp + 16, bp: savedBP}, nil
}
