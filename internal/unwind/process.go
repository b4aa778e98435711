package unwind

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/procfs"
)

// MaxFrames is the depth walks go to unless told otherwise: a deep
// recursion (hundreds of frames) is shown whole.
const MaxFrames = 1024

// Process unwinds the threads of one target over its address space: CFI
// for every mapped ELF file that has it, a Go binary's pclntab for its Go
// code, frame pointers for code without either. The tables of every
// module are read when the Process is made and at each Refresh, never
// during a walk (a walk may run while a thread is stopped). It is safe
// for concurrent use.
type Process struct {
	space *addrspace.Space

	mu       sync.RWMutex
	cur      []codeRange // current executable mappings, sorted by start
	gone     []codeRange // mappings gone since, for code that ran before
	known    map[*addrspace.Module]codeRange
	problems []string
	jit      JITCode
	// gen is the layout generation: each Refresh starts a new one, and
	// the rule cache's entries of older ones no longer match.
	gen uint64

	rules   *ruleCache
	noRules atomic.Bool // SetRuleCache(false)

	raMu sync.Mutex
	ras  map[uint64]bool // return addresses checked (returnAddress)
}

// NewProcess prepares to unwind the threads of the target of space.
func NewProcess(space *addrspace.Space) *Process {
	p := &Process{space: space, known: map[*addrspace.Module]codeRange{}, ras: map[uint64]bool{}, rules: new(ruleCache)}
	p.Refresh()
	return p
}

// Refresh takes in the modules the space gained since (call it after
// the space's own Refresh). Tables already read are not read again.
func (p *Process) Refresh() {
	var cur, gone []codeRange
	var problems []string
	p.mu.RLock()
	known := p.known
	p.mu.RUnlock()
	fresh := map[*addrspace.Module]codeRange{}
	for _, m := range p.space.Modules() {
		cr, ok := known[m]
		if !ok {
			cr = codeRangeOf(m)
		}
		fresh[m] = cr
		if cr.problem != "" {
			problems = append(problems, cr.problem)
		}
		if m.Gone {
			gone = append(gone, cr)
		} else {
			cur = append(cur, cr)
		}
	}
	sort.Slice(cur, func(i, j int) bool { return cur[i].start < cur[j].start })
	p.mu.Lock()
	p.cur, p.gone, p.known, p.problems = cur, gone, fresh, problems
	p.gen++
	p.mu.Unlock()
}

// codeRangeOf reads a module's unwind tables.
func codeRangeOf(m *addrspace.Module) codeRange {
	cr := codeRange{start: m.Start, end: m.End, bias: m.Bias, name: m.Name(), anon: m.Anon}
	if m.File == nil {
		// A file that is not ELF is no code a linker made (a jitdump
		// mapped so that perf sees it): nothing to unwind with.
		if m.Err != nil && m.IsFile() && !errors.Is(m.Err, objfile.ErrNotELF) {
			cr.problem = fmt.Sprintf("%s: no call frame information (%v); frame pointers used", m.Path, m.Err)
		}
		return cr
	}
	if _, ok := m.File.Bias(m.Start, m.Offset, m.Exec()); !ok {
		cr.problem = fmt.Sprintf("%s: mapping at offset %#x matches no loadable segment; frame pointers used", m.Path, m.Offset)
		return cr
	}
	var problems []string
	if g, err := m.File.Go(); err != nil {
		problems = append(problems, fmt.Sprintf("%v; frame pointers used for its Go code", err))
	} else {
		cr.gotab = g
	}
	cfi, err := m.File.CFI()
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("%s: no call frame information (%v); frame pointers used", m.Path, err))
	case cfi != nil:
		cr.cfi = cfi
		if cfi.Bad > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d malformed FDEs skipped", m.Path, cfi.Bad))
		}
	}
	cr.problem = strings.Join(problems, "; ")
	return cr
}

// Problems lists the modules whose code is unwound by frame pointers
// because their call frame information is missing or unusable, and why.
func (p *Process) Problems() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return append([]string(nil), p.problems...)
}

func (p *Process) lookup(pc uint64) *codeRange {
	p.mu.RLock()
	defer p.mu.RUnlock()
	i := sort.Search(len(p.cur), func(i int) bool { return p.cur[i].end > pc })
	if i < len(p.cur) && pc >= p.cur[i].start {
		return &p.cur[i]
	}
	for i := range p.gone {
		if pc >= p.gone[i].start && pc < p.gone[i].end {
			return &p.gone[i]
		}
	}
	return nil
}

// Unwind walks a stack with CFI where the code has it and frame pointers
// elsewhere. The result starts with regs.IP.
func (p *Process) Unwind(regs Regs, mem Memory, max int) []uint64 {
	return p.UnwindTrace(regs, mem, max).PCs
}

// UnwindTrace is Unwind, saying how each frame was found and why the walk
// ended.
func (p *Process) UnwindTrace(regs Regs, mem Memory, max int) Trace {
	w := p.walker(mem)
	return w.walk(regs, max)
}

// walker is a walk of this process's stacks reading mem.
func (p *Process) walker(mem Memory) walker {
	p.mu.RLock()
	j, gen := p.jit, p.gen
	p.mu.RUnlock()
	w := walker{proc: p, mem: mem, code: p.space.Memory(), jit: j, gen: gen}
	if j != nil {
		w.jitGen = j.Generation()
	}
	if !p.noRules.Load() {
		w.rules = p.rules
	}
	return w
}

// SetRuleCache turns the cache of per-address unwind rules on (the
// default) or off. Off, every frame is looked up in the mappings and its
// module's tables: the reference the cache is tested and measured
// against. Stacks are the same either way.
func (p *Process) SetRuleCache(on bool) { p.noRules.Store(!on) }

// SetJIT gives the unwind rules of the target's JIT code (package target
// sets it from the target's jitdumps).
func (p *Process) SetJIT(j JITCode) {
	p.mu.Lock()
	p.jit = j
	p.mu.Unlock()
}

// ErrRunning is returned by BlockedStack for a thread that is on a CPU:
// its registers are live, not saved where /proc can show them.
var ErrRunning = errors.New("thread is running in user space; its registers are not saved")

// BlockedStack unwinds a thread blocked in the kernel without stopping
// it: the stack and instruction pointers are those /proc shows in
// task/<tid>/syscall, the stack is read with process_vm_readv (it does not
// change while the thread is blocked), and frames are unwound with CFI.
// Where a frame needs the frame pointer, which /proc does not show, the
// stack is scanned for a saved frame pointer and return address pair
// (Trace.How says Scanned).
func (p *Process) BlockedStack(tid int) ([]uint64, Cut, error) {
	t, err := p.BlockedTrace(tid, MaxFrames)
	return t.PCs, t.Cut, err
}

// BlockedTrace is BlockedStack, saying how each frame was found.
func (p *Process) BlockedTrace(tid int, max int) (Trace, error) {
	sc, err := procfs.ReadSyscall(p.space.Pid(), tid)
	if err != nil {
		return Trace{}, fmt.Errorf("unwind: syscall of thread %d: %w", tid, err)
	}
	if sc.Running {
		return Trace{}, ErrRunning
	}
	if sc.PC == 0 || sc.SP == 0 {
		return Trace{}, fmt.Errorf("unwind: thread %d: no user registers in /proc (a kernel thread?)", tid)
	}
	w := p.walker(p.space.Memory())
	w.scan = true
	return w.walk(Regs{IP: sc.PC, SP: sc.SP}, max), nil
}

// Sample is what a perf sample carries to unwind its user stack: the user
// registers at the sample, the copy of the stack taken from regs.SP
// (PERF_SAMPLE_STACK_USER) and the kernel's own frame-pointer walk of the
// user stack (the callchain: the sampled IP, then return addresses).
type Sample struct {
	Regs  Regs
	Stack []byte
	FP    []uint64
	// Time is the sample's CLOCK_MONOTONIC time: the JIT code live then.
	Time uint64
}

// UnwindSample returns the user stack of a sample, innermost first,
// appended to dst, and why it ends. Frames inside the stack copy are
// unwound with call frame information, Go frame sizes and frame pointers
// (in that order of preference, per frame); beyond the copy, the
// kernel's frame-pointer chain is joined where both walks agree on a
// return address, and followed only while each of its return addresses
// is in executable code right after a call: bytes of the stack are never
// taken for frames. The walk ends with a Cut saying why when it could go
// no further before the thread's first function.
func (p *Process) UnwindSample(smp Sample, max int, dst []uint64) ([]uint64, Cut) {
	out := dst
	if len(smp.Stack) == 0 {
		return p.validFP(smp.FP, max, out)
	}
	w := p.walker(nil)
	w.stack, w.onStack = dumpMemory{base: smp.Regs.SP, b: smp.Stack}, true
	w.t, w.copySize = smp.Time, len(smp.Stack)
	s := newFrameState(smp.Regs)
	out = append(out, smp.Regs.IP)
	n := 1
	for n < max {
		res := w.step(&s)
		if res.end {
			if !res.cut.Truncated() {
				return out, Cut{}
			}
			return p.join(out, n, res.cut, smp.FP, max)
		}
		if !w.executable(s.ip(), res.signal) {
			return out, Cut{Reason: NotExecutable, PC: s.ip()}
		}
		out = append(out, s.ip())
		n++
	}
	return out, Cut{Reason: TooDeep, Limit: max}
}

// join continues a walk cut at frame n (out holds its frames, the last n
// of them this walk's) with the kernel's frame-pointer chain, from the
// outermost return address both found.
func (p *Process) join(out []uint64, n int, cut Cut, fp []uint64, max int) ([]uint64, Cut) {
	walk := out[len(out)-n:]
	for i := len(walk) - 1; i >= 1; i-- {
		for j := 1; j < len(fp); j++ {
			if walk[i] == fp[j] {
				out = out[:len(out)-n+i+1]
				more, end := p.follow(out, i+1, fp[j+1:], max)
				if cut.Reason == CopyExhausted && end.Reason == NoUnwindInfo {
					// Where the chain ends is frame pointers' limit
					// (code that has CFI but keeps no frame pointer);
					// the copy's end is why the walk needed them, and
					// a larger copy is the fix.
					end = cut
				}
				return more, end
			}
		}
	}
	return out, cut
}

// follow appends the return addresses of a frame-pointer chain while each
// is in executable code right after a call instruction; n frames are
// already in out.
func (p *Process) follow(out []uint64, n int, fp []uint64, max int) ([]uint64, Cut) {
	for _, ra := range fp {
		if n >= max {
			return out, Cut{Reason: TooDeep, Limit: max}
		}
		if !p.returnAddress(ra) {
			return out, Cut{Reason: NotExecutable, PC: ra}
		}
		out = append(out, ra)
		n++
	}
	// The chain ended where frame pointers end: at the thread's first
	// function, or in code that does not keep them.
	return out, Cut{Reason: NoUnwindInfo, Module: moduleName(p.lookup(out[len(out)-1] - 1)), PC: out[len(out)-1]}
}

// validFP is the kernel's frame-pointer chain as far as it is valid (the
// cheapest unwinding: no stack copy).
func (p *Process) validFP(fp []uint64, max int, out []uint64) ([]uint64, Cut) {
	if len(fp) == 0 {
		return out, Cut{Reason: Unreadable}
	}
	out = append(out, fp[0])
	return p.follow(out, 1, fp[1:], max)
}

// returnAddress reports whether ra is in executable code right after a
// call instruction, reading the code from the target (cached per
// address: code does not change).
func (p *Process) returnAddress(ra uint64) bool {
	p.raMu.Lock()
	ok, seen := p.ras[ra]
	p.raMu.Unlock()
	if seen {
		return ok
	}
	w := p.walker(p.space.Memory())
	ok = ra > 1 && p.lookup(ra-1) != nil && w.isReturnAddress(ra)
	p.raMu.Lock()
	if len(p.ras) >= maxCachedRAs {
		clear(p.ras)
	}
	p.ras[ra] = ok
	p.raMu.Unlock()
	return ok
}

// maxCachedRAs bounds the cache of checked return addresses.
const maxCachedRAs = 1 << 16
