package unwind

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"golang.org/x/sys/unix"
)

// MaxFrames is the depth BlockedStack walks to.
const MaxFrames = 128

// Process unwinds the threads of one process: CFI for every mapped ELF
// file that has it (read through /proc/<pid>/root, parsed once per file),
// frame pointers for code without it. It is safe for concurrent use.
type Process struct {
	pid int
	mem Memory

	mu       sync.RWMutex
	ranges   []codeRange // executable mappings, sorted by start
	modules  map[moduleID]*moduleCFI
	problems []string
}

type moduleID struct {
	path  string
	inode uint64
}

// NewProcess reads pid's mappings and the call frame information of each
// executable file it maps.
func NewProcess(pid int) (*Process, error) {
	p := &Process{pid: pid, mem: ProcessMemory(pid), modules: make(map[moduleID]*moduleCFI)}
	if err := p.Refresh(); err != nil {
		return nil, err
	}
	return p, nil
}

// Refresh reads the mappings again (after the target loaded or unloaded
// code). Files already parsed are not read again.
func (p *Process) Refresh() error {
	maps, err := procfs.ReadMaps(p.pid)
	if err != nil {
		return fmt.Errorf("unwind: maps of pid %d: %w", p.pid, err)
	}
	var ranges []codeRange
	var problems []string
	seen := make(map[moduleID]*moduleCFI)
	for _, m := range maps {
		if !m.Exec() {
			continue
		}
		cr := codeRange{start: m.Start, end: m.End, name: m.Path}
		if cr.name == "" {
			cr.name = "[anon]"
		}
		var mod *moduleCFI
		switch {
		case m.IsFile():
			id := moduleID{m.Path, m.Inode}
			var err error
			if mod = seen[id]; mod == nil {
				mod, err = p.fileModule(m, id)
			}
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: no call frame information (%v); frame pointers used", m.Path, err))
			}
			if mod != nil {
				seen[id] = mod
			}
		case m.Path == "[vdso]":
			mod = p.vdsoModule(m)
		}
		if mod != nil && (mod.eh != nil || mod.gotab != nil) {
			if bias, ok := mod.bias(m.Start, m.End, m.Offset); ok {
				cr.cfi, cr.gotab, cr.bias = mod.eh, mod.gotab, bias
			} else {
				problems = append(problems, fmt.Sprintf("%s: mapping at offset %#x matches no loadable segment; frame pointers used", m.Path, m.Offset))
			}
		}
		if mod != nil && mod.goErr != nil {
			problems = append(problems, fmt.Sprintf("%v; frame pointers used for its Go code", mod.goErr))
		}
		if mod != nil && mod.bad > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d malformed FDEs skipped", m.Path, mod.bad))
		}
		ranges = append(ranges, cr)
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].start < ranges[j].start })
	p.mu.Lock()
	p.ranges, p.problems = ranges, problems
	for id, mod := range seen {
		p.modules[id] = mod
	}
	p.mu.Unlock()
	return nil
}

// fileModule opens a mapped file as the target sees it and parses it,
// reusing what an earlier Refresh parsed.
func (p *Process) fileModule(m procfs.Mapping, id moduleID) (*moduleCFI, error) {
	p.mu.RLock()
	mod := p.modules[id]
	p.mu.RUnlock()
	if mod != nil {
		return mod, nil
	}
	f, err := p.openMapped(m)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return loadFileCFI(f, m.Path)
}

// openMapped opens the file behind m: by its path inside the target's
// root, or, when that names another file now (replaced, deleted), through
// /proc/<pid>/map_files, which holds the mapped file itself.
func (p *Process) openMapped(m procfs.Mapping) (*os.File, error) {
	if !m.Deleted {
		f, err := procfs.OpenInRoot(p.pid, m.Path, false)
		if err == nil {
			var st unix.Stat_t
			if unix.Fstat(int(f.Fd()), &st) == nil && st.Ino == m.Inode {
				return f, nil
			}
			f.Close()
		}
	}
	f, err := os.Open(m.MapFilesPath(p.pid))
	if err != nil {
		return nil, err
	}
	return f, nil
}

// vdsoModule parses the vDSO from the target's memory; nil when it cannot.
func (p *Process) vdsoModule(m procfs.Mapping) *moduleCFI {
	size := m.End - m.Start
	if size == 0 || size > 1<<20 {
		return nil
	}
	b := make([]byte, size)
	if _, err := p.mem.ReadAt(b, m.Start); err != nil {
		return nil
	}
	mod, err := parseMemoryModule(b, "[vdso]")
	if err != nil {
		return nil
	}
	return mod
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
	i := sort.Search(len(p.ranges), func(i int) bool { return p.ranges[i].end > pc })
	if i < len(p.ranges) && pc >= p.ranges[i].start {
		return &p.ranges[i]
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
	sc, err := procfs.ReadSyscall(p.pid, tid)
	if err != nil {
		return Trace{}, fmt.Errorf("unwind: syscall of thread %d: %w", tid, err)
	}
	if sc.Running {
		return Trace{}, ErrRunning
	}
	if sc.PC == 0 || sc.SP == 0 {
		return Trace{}, fmt.Errorf("unwind: thread %d: no user registers in /proc (a kernel thread?)", tid)
	}
	w := walker{lookup: p.lookup, mem: p.mem, scan: true}
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
