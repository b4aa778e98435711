package unwind

import (
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/stallwatch/stallwatch/internal/callframe"
)

// ehFrame is an .eh_frame (absolute addresses) for code at start: the CFA
// is rsp+cfa throughout, and the return address is just below it.
func ehFrame(t *testing.T, start, size uint64, cfa byte) *callframe.Table {
	t.Helper()
	record := func(out, body []byte) []byte {
		for (4+len(body))%8 != 0 {
			body = append(body, 0) // DW_CFA_nop
		}
		return append(binary.LittleEndian.AppendUint32(out, uint32(len(body))), body...)
	}
	cie := []byte{0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0, 0x0c, 7, cfa, 0x90, 1}
	out := record(nil, cie)
	fde := binary.LittleEndian.AppendUint32(nil, uint32(len(out)+4))
	fde = binary.LittleEndian.AppendUint64(fde, start)
	fde = binary.LittleEndian.AppendUint64(fde, size)
	fde = append(fde, 0)
	out = binary.LittleEndian.AppendUint32(record(out, fde), 0)
	cfi, err := callframe.ParseEhFrame("test code", out, 0)
	if err != nil || cfi.Len() != 1 {
		t.Fatalf("eh_frame: %v", err)
	}
	return cfi
}

// replacedJIT is JIT code replaced at the same address at time at: its
// rules before and after (for code at [start, start+size) only).
type replacedJIT struct {
	start, size, at uint64
	before, after   *callframe.Table
}

func (j *replacedJIT) UnwindInfo(pc, t uint64) (*callframe.Table, uint64, JITSpan, bool) {
	if pc < j.start || pc >= j.start+j.size {
		return nil, 0, JITSpan{0, math.MaxUint64}, false
	}
	if t < j.at {
		return j.before, 0, JITSpan{0, j.at}, true
	}
	return j.after, 0, JITSpan{j.at, math.MaxUint64}, true
}

func (j *replacedJIT) Generation(uint64) uint64 { return 1 }

func (j *replacedJIT) Unchanged(g, lo, hi uint64) bool { return g == 1 }

// withRange is p with one more executable range, as a Refresh that found
// it would leave p.
func withRange(t *testing.T, p *Process, cr codeRange) {
	t.Helper()
	if p.lookup(cr.start) != nil || p.lookup(cr.end-1) != nil {
		t.Fatalf("%#x-%#x is mapped in this process already", cr.start, cr.end)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur = append(slices.Clone(p.cur), cr)
	sort.Slice(p.cur, func(i, j int) bool { return p.cur[i].start < p.cur[j].start })
	p.gen++
}

// TestReplacedJITCodeNotStale: JIT code replaced at one address by code
// with other unwind rules (a recompiled function) is unwound by the rules
// of the code live at each sample's time, however the samples of the two
// are interleaved and however warm the cache: a rule of the old code is
// never reused for the new.
func TestReplacedJITCodeNotStale(t *testing.T) {
	own(t)
	p := NewProcess(ownSpace)
	const (
		code  = 0x10000000 // anonymous executable memory of a JIT
		size  = 0x1000
		fn    = code + 0x100 // the replaced function
		calls = code + 0x800 // its callers' code, which has no rules
		sp    = 0x7ffe0000
	)
	withRange(t, p, codeRange{start: code, end: code + size, anon: true, name: "[anon:jit]"})
	j := &replacedJIT{start: fn, size: 0x100, at: 1000,
		before: ehFrame(t, fn, 0x100, 8),  // a leaf: the return address on top
		after:  ehFrame(t, fn, 0x100, 24), // a 16-byte frame below it
	}
	p.SetJIT(j)
	stack := make([]byte, 64)
	retOld, retNew := uint64(calls+0x11), uint64(calls+0x22)
	binary.LittleEndian.PutUint64(stack[0:], retOld)
	binary.LittleEndian.PutUint64(stack[16:], retNew)
	want := map[uint64][]uint64{500: {fn + 4, retOld}, 1500: {fn + 4, retNew}}
	for round := 0; round < 3; round++ {
		for _, tm := range []uint64{500, 1500, 1500, 500} {
			got, _ := p.UnwindSample(Sample{Regs: Regs{IP: fn + 4, SP: sp}, Stack: stack, Time: tm}, MaxFrames, nil)
			if !slices.Equal(got, want[tm]) {
				t.Fatalf("round %d, sample at %d: %#x, want %#x (the rules of the code live then)", round, tm, got, want[tm])
			}
		}
	}
}

// TestRuleCacheNewLayout: a frame cached in one layout of the address
// space is looked up again in the next: code mapped anew where other code
// was (dlclose, then dlopen at the same address) is unwound by its own
// rules.
func TestRuleCacheNewLayout(t *testing.T) {
	own(t)
	p := NewProcess(ownSpace)
	const (
		code = 0x10000000
		size = 0x1000
		fn   = code + 0x100
		ret  = code + 0x811
		sp   = 0x7ffe0000
	)
	withRange(t, p, codeRange{start: code, end: code + size, cfi: ehFrame(t, fn, 0x100, 8), name: "old.so"})
	stack := make([]byte, 64)
	binary.LittleEndian.PutUint64(stack[0:], ret)
	binary.LittleEndian.PutUint64(stack[16:], ret+0x11)
	smp := Sample{Regs: Regs{IP: fn + 4, SP: sp}, Stack: stack}
	for range 2 { // cold, then warm
		if got, _ := p.UnwindSample(smp, MaxFrames, nil); !slices.Equal(got, []uint64{fn + 4, ret}) {
			t.Fatalf("old code: %#x", got)
		}
	}
	if p.rules.get(p.gen, fn+4) == nil {
		t.Fatal("the frame was not cached")
	}
	// The next layout: other code at the same address.
	p.mu.Lock()
	p.cur = slices.DeleteFunc(slices.Clone(p.cur), func(cr codeRange) bool { return cr.start == code })
	p.mu.Unlock()
	withRange(t, p, codeRange{start: code, end: code + size, cfi: ehFrame(t, fn, 0x100, 24), name: "new.so"})
	if got, _ := p.UnwindSample(smp, MaxFrames, nil); !slices.Equal(got, []uint64{fn + 4, ret + 0x11}) {
		t.Fatalf("new code at the old code's address: %#x, want the new code's caller", got)
	}
}

// generationsJIT answers with rules[gen] for code at [start, start+size)
// and counts the questions: a JIT whose files, read again, say other
// rules for the same code at the same time (a perf map's later line).
type generationsJIT struct {
	start, size uint64
	gen         uint64
	rules       map[uint64]*callframe.Table
	asked       int
}

func (j *generationsJIT) UnwindInfo(pc, t uint64) (*callframe.Table, uint64, JITSpan, bool) {
	j.asked++
	if pc < j.start || pc >= j.start+j.size {
		return nil, 0, JITSpan{0, math.MaxUint64}, false
	}
	return j.rules[j.gen], 0, JITSpan{0, math.MaxUint64}, true
}

func (j *generationsJIT) Generation(uint64) uint64 { return j.gen }

// Unchanged: each generation changes the rules of all its code.
func (j *generationsJIT) Unchanged(g, lo, hi uint64) bool {
	return g == j.gen || hi <= j.start || lo >= j.start+j.size
}

// TestJITRulesCachedPerGeneration: JIT code's rules are cached for the
// span and generation its JIT answered for — a second walk asks nothing —
// and a new generation is asked again: rules the JIT's files changed are
// never reused.
func TestJITRulesCachedPerGeneration(t *testing.T) {
	own(t)
	p := NewProcess(ownSpace)
	const (
		code  = 0x20000000
		size  = 0x1000
		fn    = code + 0x100
		calls = code + 0x800
		sp    = 0x7ffe0000
	)
	withRange(t, p, codeRange{start: code, end: code + size, anon: true, name: "[anon:jit]"})
	j := &generationsJIT{start: fn, size: 0x100, gen: 1, rules: map[uint64]*callframe.Table{
		1: ehFrame(t, fn, 0x100, 8),
		2: ehFrame(t, fn, 0x100, 24),
	}}
	p.SetJIT(j)
	stack := make([]byte, 64)
	retOld, retNew := uint64(calls+0x11), uint64(calls+0x22)
	binary.LittleEndian.PutUint64(stack[0:], retOld)
	binary.LittleEndian.PutUint64(stack[16:], retNew)
	walk := func() []uint64 {
		got, _ := p.UnwindSample(Sample{Regs: Regs{IP: fn + 4, SP: sp}, Stack: stack, Time: 500}, MaxFrames, nil)
		return got
	}
	if got := walk(); !slices.Equal(got, []uint64{fn + 4, retOld}) {
		t.Fatalf("generation 1: %#x", got)
	}
	asked := j.asked
	if got := walk(); !slices.Equal(got, []uint64{fn + 4, retOld}) || j.asked != asked {
		t.Fatalf("generation 1 again: %#x, the JIT asked %d more times (want 0: cached)", got, j.asked-asked)
	}
	j.gen = 2
	if got := walk(); !slices.Equal(got, []uint64{fn + 4, retNew}) {
		t.Fatalf("generation 2: %#x, want %#x (the rules of the new generation)", got, []uint64{fn + 4, retNew})
	}
}
