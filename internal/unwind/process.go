package unwind

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/procfs"
)

// MaxFrames is the depth BlockedStack walks to.
const MaxFrames = 128

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
}

// NewProcess prepares to unwind the threads of the target of space.
func NewProcess(space *addrspace.Space) *Process {
	p := &Process{space: space, known: map[*addrspace.Module]codeRange{}}
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
	p.mu.Unlock()
}

// codeRangeOf reads a module's unwind tables.
func codeRangeOf(m *addrspace.Module) codeRange {
	cr := codeRange{start: m.Start, end: m.End, bias: m.Bias, name: m.Name()}
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
	w := walker{lookup: p.lookup, mem: mem}
	return w.walk(regs, max)
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
func (p *Process) BlockedStack(tid int) ([]uint64, error) {
	t, err := p.BlockedTrace(tid, MaxFrames)
	return t.PCs, err
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
	w := walker{lookup: p.lookup, mem: p.space.Memory(), scan: true}
	return w.walk(Regs{IP: sc.PC, SP: sc.SP}, max), nil
}

// Repair improves a callchain the kernel made by following frame
// pointers (perf's user callchain: the sampled IP, then return addresses)
// using the sample's user registers and the copy of its stack taken from
// regs.SP (PERF_SAMPLE_STACK_USER). Frames inside the copy are unwound
// with CFI, which finds the callers that code without frame pointers (a
// libc built without them) hides from the kernel's walk; once the walk
// reaches the frame that owns the sampled frame pointer, the kernel's
// chain is right again and its remainder is appended. When the two cannot
// be joined the longer of the two answers is returned.
func (p *Process) Repair(regs Regs, dump Memory, fpChain []uint64) []uint64 {
	w := walker{lookup: p.lookup, mem: dump}
	s := newFrameState(regs)
	out := []uint64{regs.IP}
	for len(out) < MaxFrames {
		res := w.step(&s)
		if res.end != "" {
			if res.end == EndOfStack {
				return out
			}
			break
		}
		out = append(out, s.ip())
		// The frame just unwound kept the sampled frame pointer: its
		// return address is the kernel chain's second entry, and the
		// kernel chain is right from there on.
		if regs.BPKnown && res.how == CFI && res.cfa == regs.BP+16 && len(fpChain) > 1 && s.ip() == fpChain[1] {
			return append(out, fpChain[2:]...)
		}
	}
	// Join on a return address both walks found.
	for i := len(out) - 1; i >= 1; i-- {
		for j := 1; j < len(fpChain); j++ {
			if out[i] == fpChain[j] {
				return append(out[:i+1], fpChain[j+1:]...)
			}
		}
	}
	if len(out) >= len(fpChain) {
		return out
	}
	return fpChain
}
