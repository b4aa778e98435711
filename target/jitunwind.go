package target

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stallwatch/stallwatch/internal/callframe"
	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/jit"
)

// jitUnwind gives the unwinder the rules of the target's JIT code (it
// implements unwind.JITCode): the call frame information a runtime
// published for a piece of code in its jitdump (CODE_UNWINDING_INFO:
// CPython 3.13's -X perf_jit, V8, LLVM's JITLink), at the time of the
// sample, since code and its tables can be replaced at the same address;
// and, for CPython 3.12's -X perf trampolines, which only a perf map
// names, the rules of their known four instructions.
type jitUnwind struct {
	p *Process

	// gen counts the indexes taken in (Generation): an answer holds for
	// the Index it came from, which never changes, and in the later ones
	// where changes says nothing changed at its address.
	gen     atomic.Uint64
	changes atomic.Pointer[changeLog]

	mu      sync.Mutex
	ix      *jit.Index
	updated time.Time
	cfis    map[cfiKey]*callframe.Table // nil value: no usable rules
	// python: the target's JIT files are CPython's, so code no file
	// describes yet may be one of its trampolines.
	python bool
}

type cfiKey struct {
	start uint64
	eh    *byte // the unwinding info's bytes (shared by identical ones)
}

// maxJITCFIs bounds the parsed tables kept.
const maxJITCFIs = 1 << 14

// refreshEvery bounds how often a lookup that found no code reads what the
// JIT files gained (the sampler's reader calls in here as samples arrive).
const refreshEvery = time.Second

// setIndex takes in the JIT sources' latest index.
func (j *jitUnwind) setIndex(ix *jit.Index) {
	python := false
	for _, s := range j.p.jit.Sources() {
		python = python || s.Runtime == jit.RuntimeCPython
	}
	j.mu.Lock()
	j.take(ix)
	j.python = python
	j.mu.Unlock()
}

// take makes ix the index answers come from (j.mu held), and notes
// where its code differs from the index before it.
func (j *jitUnwind) take(ix *jit.Index) {
	if ix == j.ix {
		return
	}
	changed, ok := ix.ChangedSince(j.ix)
	j.ix = ix
	// The log first: a generation is never seen without its changes.
	g := j.gen.Load() + 1
	j.changes.Store(j.changes.Load().then(g, changed, ok))
	j.gen.Store(g)
}

// Generation changes whenever another index is taken in. For a sample at
// t newer than the last read of the GDB JIT interface's list, the list
// is read again first (the whole list at most once in gdbReadGap, sooner
// when its head names an object not read): code the interface
// registered since is asked for in the generation it starts.
func (j *jitUnwind) Generation(t uint64) uint64 {
	if t == 0 {
		t = math.MaxUint64
	}
	if j.p.jit != nil && j.p.jit.ReadGDBJIT(t, gdbReadGap) {
		j.mu.Lock()
		j.take(j.p.jit.Index())
		j.mu.Unlock()
	}
	return j.gen.Load()
}

// Unchanged reports whether no code was loaded, moved or freed over
// [lo, hi) from generation g to now (unwind.JITCode): the answers of g
// there still hold.
func (j *jitUnwind) Unchanged(g, lo, hi uint64) bool {
	cur := j.gen.Load()
	return j.changes.Load().unchanged(g, cur, lo, hi)
}

// maxChangeLog bounds the generations whose changes are kept: an answer
// older than them is asked again.
const maxChangeLog = 64

// changeLog is what each of the last generations changed, oldest first;
// it is never modified once published.
type changeLog struct {
	gens []genChange
}

// genChange is where generation gen's index differs from the one before
// (all: anywhere, its code read again from the start).
type genChange struct {
	gen     uint64
	all     bool
	changed []jit.Range
}

// then is the log with generation g's changes added, its oldest dropped
// past maxChangeLog.
func (c *changeLog) then(g uint64, changed []jit.Range, ok bool) *changeLog {
	var gens []genChange
	if c != nil {
		gens = c.gens[max(0, len(c.gens)+1-maxChangeLog):]
	}
	return &changeLog{gens: append(slices.Clip(gens), genChange{gen: g, all: !ok, changed: changed})}
}

// unchanged reports whether the generations after g up to cur changed
// nothing over [lo, hi).
func (c *changeLog) unchanged(g, cur, lo, hi uint64) bool {
	if g == cur {
		return true
	}
	if c == nil || g > cur || len(c.gens) == 0 || c.gens[0].gen > g+1 {
		return false // generations not logged any more
	}
	for _, gc := range c.gens {
		if gc.gen <= g || gc.gen > cur {
			continue
		}
		if gc.all {
			return false
		}
		// The first range ending after lo is the only one that can
		// overlap [lo, hi) first.
		i, _ := slices.BinarySearchFunc(gc.changed, lo, func(r jit.Range, lo uint64) int { return cmp.Compare(r.End, lo+1) })
		if i < len(gc.changed) && gc.changed[i].Start < hi {
			return false
		}
	}
	return true
}

// UnwindInfo returns the rules of the JIT code live at pc at time t (0:
// the latest); bias is 0: the tables hold run-time addresses. An answer
// from the code the index has at pc holds over the index's span of it
// (and its rules are those of that code, parsed once); that no file
// describes pc holds over that span too, for samples up to refreshEvery
// after the answer (a later one asks again, and may have the files read
// again); a trampoline found by its bytes where the index has nothing
// holds for no time (the next frame there asks again).
func (j *jitUnwind) UnwindInfo(pc, t uint64) (*callframe.Table, uint64, unwind.JITSpan, bool) {
	if t == 0 {
		t = math.MaxUint64
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	sym, span, ok := j.lookup(pc, t)
	valid := unwind.JITSpan{From: span.From, Until: span.Until}
	if !ok {
		if !j.python {
			return nil, 0, j.undescribed(valid), false
		}
		// A JIT that buffers its jitdump (CPython 3.13's -X perf_jit)
		// may not have written the code's record yet; its trampolines
		// are known by their bytes.
		cfi := j.trampolineAt(pc)
		return cfi, 0, unwind.JITSpan{}, cfi != nil
	}
	if u, ok := j.ix.Unwinding(sym); ok && len(u.EhFrame) > 0 {
		cfi := j.published(sym, u)
		return cfi, 0, valid, cfi != nil
	}
	if sym.Runtime == jit.RuntimeCPython {
		cfi := j.trampoline(sym)
		return cfi, 0, valid, cfi != nil
	}
	return nil, 0, valid, false
}

// FuncAt returns the range of the JIT code live at pc at time t (0: the
// latest): the function the unwinder checks calls into (unwind.JITFuncs);
// valid as UnwindInfo's.
func (j *jitUnwind) FuncAt(pc, t uint64) (lo, hi uint64, valid unwind.JITSpan, ok bool) {
	if t == 0 {
		t = math.MaxUint64
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	sym, span, ok := j.lookup(pc, t)
	valid = unwind.JITSpan{From: span.From, Until: span.Until}
	if !ok {
		return 0, 0, j.undescribed(valid), false
	}
	return sym.Start, sym.End(), valid, true
}

// undescribed is how long the answer that no file describes an address
// holds: over the index's span, for samples up to refreshEvery after it
// was given (what a lookup that finds nothing reads the files again
// after), and, in a process with a GDB JIT interface, for samples up to
// its list's last look: a later one asks again, and has the list's head
// read (code registered since is there).
func (j *jitUnwind) undescribed(span unwind.JITSpan) unwind.JITSpan {
	span.Until = min(span.Until, monotime.Now()+uint64(refreshEvery))
	if j.p.jit != nil {
		if looked := j.p.jit.GDBJITLooked(); looked != 0 {
			span.Until = min(span.Until, looked+1)
		}
	}
	return span
}

// gdbReadGap bounds how often the unwinder has the GDB JIT interface's
// whole list read again (what finds the code it freed); code it registers
// is seen sooner, by the list's head (jit.Process.ReadGDBJIT), and by the
// samples taken in it before it was read.
const gdbReadGap = uint64(20 * time.Millisecond)

// lookup finds the JIT code at pc at time t, reading what the JIT files
// gained when it finds none (at most once a second), and the GDB JIT
// interface's list first when the sample is newer than its last read.
func (j *jitUnwind) lookup(pc, t uint64) (*jit.Symbol, jit.Span, bool) {
	if j.p.jit != nil && j.p.jit.ReadGDBJIT(t, gdbReadGap) {
		j.take(j.p.jit.Index())
	}
	s, span, ok := j.ix.LookupSpan(pc, t)
	if !ok && j.p.jit != nil && j.p.jit.ReadGDBJITHead(t) {
		j.take(j.p.jit.Index())
		s, span, ok = j.ix.LookupSpan(pc, t)
	}
	if ok || j.p.jit == nil || time.Since(j.updated) < refreshEvery {
		return s, span, ok
	}
	j.updated = time.Now()
	_ = j.p.jit.Update()
	j.take(j.p.jit.Index())
	return j.ix.LookupSpan(pc, t)
}

// published parses the unwinding info a runtime wrote for sym. Its
// .eh_frame's addresses are relative to where perf's jitdump conversion
// puts it, after the code: the placement whose FDE covers the code is
// the one the runtime meant.
func (j *jitUnwind) published(sym *jit.Symbol, u jit.Unwinding) *callframe.Table {
	key := cfiKey{start: sym.Start, eh: &u.EhFrame[0]}
	if cfi, ok := j.cfis[key]; ok {
		return cfi
	}
	var found *callframe.Table
	if u.Addr != 0 {
		// A GDB JIT object's, relocated where it lies.
		if cfi, err := callframe.ParseEhFrame(fmt.Sprintf("JIT object's .eh_frame at %#x", u.Addr), u.EhFrame, u.Addr); err == nil && cfi.Len() > 0 {
			found = cfi
		}
		j.keep(key, found)
		return found
	}
	for _, align := range []uint64{8, 16, 1, 4, 32} {
		base := (sym.Start + sym.Size + align - 1) &^ (align - 1)
		cfi, err := callframe.ParseEhFrame(fmt.Sprintf("jit code at %#x", sym.Start), u.EhFrame, base)
		if err != nil || cfi.Len() == 0 {
			continue
		}
		if row, err := cfi.RowAt(sym.Start); err == nil && row != nil && row.FnStart == sym.Start {
			found = cfi
			break
		}
	}
	j.keep(key, found)
	return found
}

// CPython 3.12's perf trampoline (Python/asm_trampoline.S), copied for
// every Python function that runs while -X perf is on: sub $8, %rsp;
// call *%rcx; add $8, %rsp; ret — with endbr64 first under CET.
var (
	pyTrampoline   = []byte{0x48, 0x83, 0xec, 0x08, 0xff, 0xd1, 0x48, 0x83, 0xc4, 0x08, 0xc3}
	endbr64        = []byte{0xf3, 0x0f, 0x1e, 0xfa}
	maxTrampolines = 64 // bytes read of a trampoline
)

// trampoline gives the rules of a CPython perf trampoline: the stack
// pointer is 8 below the call's frame after the sub, as it was again
// after the add. Code that is not exactly the trampoline gets none.
func (j *jitUnwind) trampoline(sym *jit.Symbol) *callframe.Table {
	key := cfiKey{start: sym.Start}
	if cfi, ok := j.cfis[key]; ok {
		return cfi
	}
	code := make([]byte, min(sym.Size, uint64(maxTrampolines)))
	var cfi *callframe.Table
	if _, err := j.p.space.Memory().ReadAt(code, sym.Start); err == nil {
		body := bytes.TrimPrefix(code, endbr64)
		if bytes.HasPrefix(body, pyTrampoline) {
			sub := uint64(len(code) - len(body)) // where sub $8, %rsp starts
			cfi, _ = callframe.ParseEhFrame("CPython perf trampoline", trampolineEhFrame(sym.Start, uint64(len(code)), sub+4, sub+10), 0)
		}
	}
	j.keep(key, cfi)
	return cfi
}

// trampolineAt gives the rules of a CPython trampoline whose call returns
// to pc+1 (pc is a return address minus one), found by its bytes around
// pc, when no symbol file has described it yet.
func (j *jitUnwind) trampolineAt(pc uint64) *callframe.Table {
	ret := pc + 1
	const callEnd = 6 // the return address's offset in the trampoline
	if ret < callEnd+uint64(len(endbr64)) {
		return nil
	}
	if cfi, ok := j.cfis[cfiKey{start: ret, eh: &endbr64[0]}]; ok {
		return cfi // checked before, by its return address
	}
	b := make([]byte, len(endbr64)+len(pyTrampoline))
	at := ret - callEnd - uint64(len(endbr64))
	if _, err := j.p.space.Memory().ReadAt(b, at); err != nil || !bytes.Equal(b[len(endbr64):], pyTrampoline) {
		j.keep(cfiKey{start: ret, eh: &endbr64[0]}, nil)
		return nil
	}
	start, size, sub := at+uint64(len(endbr64)), uint64(len(pyTrampoline)), uint64(0)
	if bytes.Equal(b[:len(endbr64)], endbr64) {
		start, size, sub = at, uint64(len(b)), uint64(len(endbr64))
	}
	key := cfiKey{start: start}
	if cfi, ok := j.cfis[key]; ok {
		return cfi
	}
	cfi, _ := callframe.ParseEhFrame("CPython perf trampoline", trampolineEhFrame(start, size, sub+4, sub+10), 0)
	j.keep(key, cfi)
	return cfi
}

// trampolineEhFrame is an .eh_frame (absolute addresses) for code at
// start: the CFA is rsp+8 at entry, rsp+16 from grown on, rsp+8 again
// from shrunk on.
func trampolineEhFrame(start, size, grown, shrunk uint64) []byte {
	cie := []byte{
		0, 0, 0, 0, // CIE id
		1,           // version
		'z', 'R', 0, // augmentation
		1,          // code alignment
		0x78,       // data alignment -8
		16,         // return address column
		1,          // augmentation data length
		0,          // FDE pointer encoding: absptr
		0x0c, 7, 8, // DW_CFA_def_cfa rsp+8
		0x90, 1, // DW_CFA_offset rip at cfa-8
	}
	prog := []byte{
		0x40 | byte(grown), 0x0e, 16, // advance_loc; def_cfa_offset 16
		0x40 | byte(shrunk-grown), 0x0e, 8, // advance_loc; def_cfa_offset 8
	}
	var out []byte
	out = appendRecord(out, cie)
	fdeAt := len(out)
	fde := binary.LittleEndian.AppendUint32(nil, uint32(fdeAt+4)) // CIE pointer: back to offset 0
	fde = binary.LittleEndian.AppendUint64(fde, start)
	fde = binary.LittleEndian.AppendUint64(fde, size)
	fde = append(fde, 0) // augmentation data length
	fde = append(fde, prog...)
	out = appendRecord(out, fde)
	return binary.LittleEndian.AppendUint32(out, 0) // terminator
}

// appendRecord appends a length-prefixed record padded with DW_CFA_nop to
// a multiple of 8 bytes.
func appendRecord(out, body []byte) []byte {
	for (4+len(body))%8 != 0 {
		body = append(body, 0)
	}
	out = binary.LittleEndian.AppendUint32(out, uint32(len(body)))
	return append(out, body...)
}

func (j *jitUnwind) keep(k cfiKey, cfi *callframe.Table) {
	if j.cfis == nil || len(j.cfis) >= maxJITCFIs {
		j.cfis = map[cfiKey]*callframe.Table{}
	}
	j.cfis[k] = cfi
}
