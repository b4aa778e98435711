package target

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/jit"
	"github.com/stallwatch/stallwatch/symbolize"
)

// Options says what a Process reads of its target.
type Options struct {
	// Kernel names kernel frames through /proc/kallsyms.
	Kernel bool
	// JIT reads the target's jitdump and perf-map files (package jit).
	JIT bool
	// DebugDirs are where separate debug files live (nil:
	// /usr/lib/debug); see objfile.Env.
	DebugDirs []string
	Logger    *slog.Logger
}

// Process is everything known about one target process, built once and
// shared by whatever reads it: its address space (mappings, their object
// files, its memory), its JIT sources, the unwinder's tables and the
// symbolizer. It is safe for concurrent use.
type Process struct {
	pid   int
	space *addrspace.Space
	jit   *jit.Process // nil without Options.JIT, or when none could be opened
	sym   *symbolize.Process
	unw   *unwind.Process
	jitUn *jitUnwind
	rts   readers // the runtimes' readers, opened at the first Readers()
	notes []string
	// looked are the modules searched for the GDB JIT interface.
	looked map[*addrspace.Module]bool
}

// Open reads pid's maps and opens its mapped files, its JIT sources and
// its kernel symbol table (as opts asks), and reads the unwind tables of
// every mapped file, so that nothing is parsed later while a thread is
// stopped. It fails only when the target's maps cannot be read (it does
// not exist, or it belongs to another user and stallwatch lacks
// CAP_SYS_PTRACE: the error says so); anything else missing is in Notes
// and the symbolizer's Stats.
func Open(pid int, opts Options) (*Process, error) {
	space, err := addrspace.Open(pid, addrspace.Options{DebugDirs: opts.DebugDirs, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	p := &Process{pid: pid, space: space}
	if opts.JIT {
		j, err := jit.OpenProcess(pid, jit.Options{})
		if err != nil {
			p.notes = append(p.notes, fmt.Sprintf("JIT sources: %v", err)) // the error names the pid
		} else {
			p.jit = j
		}
	}
	if p.jit != nil && p.watchGDBJIT() {
		_ = p.jit.Update() // what Open found is said in Sources
	}
	p.sym = symbolize.New(space, symbolize.Options{Kernel: opts.Kernel, JIT: p.jit, Logger: opts.Logger})
	p.unw = unwind.NewProcess(space)
	if p.jit != nil {
		p.jitUn = &jitUnwind{p: p, updated: time.Now()}
		p.jitUn.setIndex(p.jit.Index())
		p.unw.SetJIT(p.jitUn)
	}
	return p, nil
}

// gdbDescriptor is the GDB JIT interface's descriptor's symbol, which a
// JIT that registers its code with debuggers exports (LLVM's libraries
// do, for every program that links them).
const gdbDescriptor = "__jit_debug_descriptor"

// watchGDBJIT looks in the files mapped since the last look for the GDB
// JIT interface's descriptor, and has the JIT sources read its objects;
// it reports whether it found one.
func (p *Process) watchGDBJIT() bool {
	if p.looked == nil {
		p.looked = map[*addrspace.Module]bool{}
	}
	found := false
	for _, m := range p.space.Modules() {
		if p.looked[m] || m.Gone || m.File == nil || !m.IsFile() {
			continue
		}
		p.looked[m] = true
		v, ok, err := m.File.SymbolValue(gdbDescriptor)
		if err != nil || !ok {
			continue
		}
		p.jit.WatchGDBJIT(p.space.Memory(), v+m.Bias)
		found = true
	}
	return found
}

// Pid is the target's process id.
func (p *Process) Pid() int { return p.pid }

// Symbols names the target's addresses.
func (p *Process) Symbols() *symbolize.Process { return p.sym }

// Unwinder walks the stacks of the target's threads.
func (p *Process) Unwinder() *unwind.Process { return p.unw }

// Memory reads the target's memory (through a live thread).
func (p *Process) Memory() *addrspace.Memory { return p.space.Memory() }

// Space is the target's address space.
func (p *Process) Space() *addrspace.Space { return p.space }

// Alive reports whether a thread of the target still lives.
func (p *Process) Alive() bool { return p.space.Alive() }

// Notes are facts found at Open that every report of the target should
// say (JIT sources that could not be opened).
func (p *Process) Notes() []string { return append([]string(nil), p.notes...) }

// Refresh reads the target's maps again (new mappings opened and their
// unwind tables read, mappings that went away kept for code that ran
// before) and what its JIT sources gained since. Call it after a capture,
// before resolving its samples, and before each capture of a target
// watched for long. A target that exited is not an error: what was read
// stays usable.
func (p *Process) Refresh() error {
	var errs []error
	if err := p.space.Refresh(); err != nil && p.space.Alive() {
		errs = append(errs, err)
	}
	if p.jit != nil {
		p.watchGDBJIT()
		if err := p.jit.Update(); err != nil {
			errs = append(errs, err)
		}
		p.jitUn.setIndex(p.jit.Index())
	}
	p.sym.Refresh()
	p.unw.Refresh()
	return errors.Join(errs...)
}

// Forget says that no sample taken before horizon (CLOCK_MONOTONIC ns)
// will be resolved from now on: JIT code replaced before it may go (see
// jit.Process.Forget), and the symbolizer's caches are emptied once they
// pass their bound (symbolize.Process.Trim). A target followed for days
// then holds what its recent code needs. Call it after resolving what was
// sampled before horizon.
func (p *Process) Forget(horizon uint64) {
	if p.jit != nil {
		p.jit.Forget(horizon)
		p.jitUn.setIndex(p.jit.Index())
		p.sym.Refresh()
	}
	p.sym.Trim(0)
}

// Close releases the files and JIT sources. Locations already returned
// stay valid; what was read stays usable.
func (p *Process) Close() error {
	var err error
	if p.jit != nil {
		err = p.jit.Close()
	}
	return errors.Join(err, p.space.Close())
}

// JITCode returns the range of the JIT code live at pc at CLOCK_MONOTONIC
// time t (0: the latest), from the target's jitdumps, perf map and GDB
// JIT interface.
func (p *Process) JITCode(pc, t uint64) (start, end uint64, ok bool) {
	if p.jitUn == nil {
		return 0, 0, false
	}
	start, end, _, ok = p.jitUn.FuncAt(pc, t)
	return start, end, ok
}
