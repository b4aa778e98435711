package unwind

import (
	"math/bits"
	"sync/atomic"

	"github.com/stallwatch/stallwatch/internal/callframe"
)

// ruleCacheBits sizes a Process's rule cache: 4,096 slots, direct-mapped.
// Its memory is bounded by the slots: 32 KiB of pointers and at most one
// 168-byte entry per slot (the rows they point to are the modules' own,
// kept by package internal/objfile either way, or the JIT's, kept by
// package target; an entry carries its row's flat form), about 700 KiB a
// target. A warm stack of a few hundred
// distinct return addresses fits.
const ruleCacheBits = 12

// ruleCache remembers, per address looked up, how a frame there is
// unwound: its executable mapping and the call frame row in force (or
// none: frame pointers). A warm frame then costs a probe of one slot
// instead of a search of the mappings, of the module's FDEs and a run of
// its CFA program. Entries are immutable and published with an atomic
// store, so walks on any number of goroutines share the cache without a
// lock; a colliding address replaces the slot's entry.
//
// What is cached never changes while its key holds: the key has the
// Process's layout generation (every Refresh starts a new one, so a
// mapping replaced at the same address is looked up again). Frames
// answered from an ELF file's own tables hold for the layout. JIT code's
// rules depend on the sample's time (code and its tables can be replaced
// at one address): an entry of JIT code holds for the span of sample
// times JITCode said its answer holds, in the generation of the JIT's
// files it was asked in or a later one that changed nothing at its
// address (JITCode.Unchanged; the entry is then kept for that one), and
// a frame outside these asks JITCode again. Go code is unwound from its
// pclntab, which keeps its own tables, and is not cached.
type ruleCache struct {
	slots [1 << ruleCacheBits]atomic.Pointer[cachedRule]
}

// cachedRule is how the frame at one address is unwound.
type cachedRule struct {
	gen, pc uint64 // the key: the layout generation, the address looked up
	cr      *codeRange
	row     *callframe.Row // nil: the module has no row here; frame pointers
	ruled   uint32         // the registers row has a rule for (ruledRegs)
	fnStart uint64         // run-time start of the row's function
	flat    flatRule       // row compiled, when it is of the common form
	// jit: JIT code's rules, for sample times in span while the JIT's
	// generation is jitGen.
	jit    bool
	jitGen uint64
	span   JITSpan
}

// flatRule is a row compiled to the form nearly every frame of compiled
// code has: the CFA is a register plus an offset, the return address and
// the registers the function saved are read at offsets from the CFA, the
// stack pointer is the CFA and the other callee-saved registers keep
// their values. A warm frame is then unwound from the cache's entry
// alone, without the row's table of 17 rules (cfiStep). ok false: the
// row needs the general rules (an expression, a register rule, a signal
// frame, a rule for the stack pointer, more saved registers than fit).
type flatRule struct {
	ok     bool
	cfaReg uint8
	n      uint8 // saved[:n] are in use; saved[0] is the return address's
	cfaOff int64
	// keep: the registers the caller has as the callee had them
	// (callee-saved without a rule, and those whose rule says so).
	keep  uint32
	saved [maxFlatSaved]flatSlot
}

// flatSlot is a register saved at off from the CFA.
type flatSlot struct {
	off int32
	reg uint8
}

// maxFlatSaved bounds a flat rule's saved registers: the return address
// and the six callee-saved registers, and one to spare.
const maxFlatSaved = 8

// compileFlat compiles a row with rules for the registers in ruled to a
// flatRule, when it has the common form.
func compileFlat(rr *callframe.Row, ruled uint32) flatRule {
	ra := rr.Regs[callframe.RegRA]
	if rr.Signal || rr.CFAExpr != nil || rr.CFAReg >= callframe.NumRegs ||
		ruled&(1<<callframe.RegRSP) != 0 || ra.Kind != callframe.RuleOffset || int64(int32(ra.Off)) != ra.Off {
		return flatRule{}
	}
	f := flatRule{ok: true, cfaReg: uint8(rr.CFAReg), cfaOff: rr.CFAOff, keep: calleeSavedRegs &^ ruled, n: 1}
	f.saved[0] = flatSlot{off: int32(ra.Off), reg: callframe.RegRA}
	for m := ruled &^ (1 << callframe.RegRA); m != 0; m &= m - 1 {
		r := bits.TrailingZeros32(m)
		switch ru := rr.Regs[r]; ru.Kind {
		case callframe.RuleUndefined:
		case callframe.RuleSame:
			f.keep |= 1 << r
		case callframe.RuleOffset:
			if int(f.n) == maxFlatSaved || int64(int32(ru.Off)) != ru.Off {
				return flatRule{}
			}
			f.saved[f.n] = flatSlot{off: int32(ru.Off), reg: uint8(r)}
			f.n++
		default:
			return flatRule{}
		}
	}
	return f
}

// slotOf spreads addresses over the slots (Fibonacci hashing: nearby
// return addresses land far apart).
func slotOf(pc uint64) uint64 { return (pc * 0x9e3779b97f4a7c15) >> (64 - ruleCacheBits) }

// get returns the entry for pc in layout generation gen, or nil. A nil
// cache holds nothing.
func (c *ruleCache) get(gen, pc uint64) *cachedRule {
	if c == nil {
		return nil
	}
	if e := c.slots[slotOf(pc)].Load(); e != nil && e.pc == pc && e.gen == gen {
		return e
	}
	return nil
}

func (c *ruleCache) put(e *cachedRule) {
	if c != nil {
		c.slots[slotOf(e.pc)].Store(e)
	}
}

// ruledRegs is the set of registers a row has a rule for: the others
// follow the defaults (the stack pointer is the CFA, callee-saved
// registers keep their values).
func ruledRegs(rr *callframe.Row) uint32 {
	var m uint32
	for r := range rr.Regs {
		if rr.Regs[r].Kind != callframe.RuleUnset {
			m |= 1 << r
		}
	}
	return m
}

// calleeSavedRegs is callframe.CalleeSaved as a set.
var calleeSavedRegs = func() uint32 {
	var m uint32
	for r := 0; r < callframe.NumRegs; r++ {
		if callframe.CalleeSaved(r) {
			m |= 1 << r
		}
	}
	return m
}()

// funcCacheBits sizes a Process's cache of JIT functions' extents:
// 4,096 slots, direct-mapped, like the rule cache.
const funcCacheBits = 12

// funcCache remembers, per address, the extent of the function there (or
// that none is known: JIT code no JIT file describes), which every check
// of a caller asks twice (the function returned from and the one under
// it): a probe instead of a search of the module's FDEs or the JIT
// index's lookup.
// Entries are immutable, published with an atomic store, keyed by the
// address and the layout generation, and hold for the sample times and
// the JIT generation the JIT answered for (or a later generation that
// changed nothing at the address, JITCode.Unchanged).
type funcCache struct {
	slots [1 << funcCacheBits]atomic.Pointer[cachedFunc]
}

// cachedFunc is the function at one address.
type cachedFunc struct {
	gen, pc uint64 // the key: the layout generation, the address
	lo, hi  uint64
	ok      bool
	// jit: a JIT's answer, for sample times in span in generation
	// jitGen.
	jit    bool
	jitGen uint64
	span   JITSpan
}

func (c *funcCache) get(gen, pc uint64) *cachedFunc {
	if c == nil {
		return nil
	}
	if e := c.slots[(pc*0x9e3779b97f4a7c15)>>(64-funcCacheBits)].Load(); e != nil && e.pc == pc && e.gen == gen {
		return e
	}
	return nil
}

func (c *funcCache) put(e *cachedFunc) {
	if c != nil {
		c.slots[(e.pc*0x9e3779b97f4a7c15)>>(64-funcCacheBits)].Store(e)
	}
}
