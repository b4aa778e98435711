package symbolize

import (
	"log/slog"
	"sync"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/jit"
	"github.com/stallwatch/stallwatch/model"
)

// Process resolves addresses of one target process, over the address
// space package target owns for it (its mappings and their files). It is
// safe for use by several goroutines.
//
// Symbol tables and line tables of a file are read the first time an
// address falls in it, once per file (and kept by package
// internal/objfile for later targets).
type Process struct {
	space *addrspace.Space
	opts  Options
	log   *slog.Logger
	env   objfile.Env

	mu     sync.Mutex
	mods   map[*addrspace.Module]*mapping
	kernel *kernelSyms
	jitIx  *jit.Index // replaced at each Refresh: an Index never changes
	jitMap *model.Mapping
	// Caches, indexed by Addr.Return: uint64 keys take the maps' fast
	// path, which a struct key would not.
	cache   [2]map[uint64]cached          // user addresses
	kcache  [2]map[uint64]*model.Location // kernel addresses
	jitLocs [2]map[uint64]jitEntry        // JIT code, by address
	jitMore map[jitKey]*model.Location    // JIT code at an address that held several
	kframes map[procfs.KernelFrame]*model.Location
	cuts    map[unwind.Cut]*model.Location
	stats   Stats
	// timed: a locate since it was cleared asked the JIT index, whose
	// answer depends on the sample's time (LocateSampleTimed).
	timed bool
}

// mapping is what symbolization keeps of one module of the space.
type mapping struct {
	mod     *addrspace.Module
	pub     *model.Mapping
	syms    *objfile.Symbols // nil until loaded, or when it could not be
	loaded  bool
	addrs   int
	unnamed int
}

type cached struct {
	loc *model.Location
	// miss: nothing but a JIT can name the address (it is in anonymous
	// memory, in no mapping, or in a file that names nothing there): ask
	// the JIT index first, at the sample's time, and count loc as
	// unnamed (in m, or unknown when m is nil) once it is handed out.
	miss    bool
	counted bool
	m       *mapping
}

type jitEntry struct {
	sym *jit.Symbol
	loc *model.Location
}

type jitKey struct {
	pc  uint64
	ret bool
	sym *jit.Symbol
}

// New makes the resolver of the target whose address space is space:
// its kernel symbol table (Options.Kernel) and its JIT sources
// (Options.JIT) are used as asked.
func New(space *addrspace.Space, opts Options) *Process {
	return newProcess(space, opts, nil)
}

// newProcess takes the kernel symbols from ks when not nil (tests).
func newProcess(space *addrspace.Space, opts Options, ks *kernelSyms) *Process {
	p := &Process{
		space:   space,
		opts:    opts,
		log:     opts.Logger,
		env:     space.Env(),
		mods:    map[*addrspace.Module]*mapping{},
		cache:   [2]map[uint64]cached{{}, {}},
		kcache:  [2]map[uint64]*model.Location{{}, {}},
		jitLocs: [2]map[uint64]jitEntry{{}, {}},
		jitMore: map[jitKey]*model.Location{},
		kframes: map[procfs.KernelFrame]*model.Location{},
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if opts.Kernel {
		if ks == nil {
			ks = loadKernelSyms()
		}
		p.kernel = ks
		if ks.hidden {
			p.stats.KernelHidden = true
			p.stats.KernelNote = ks.note
		} else if ks.note != "" {
			p.stats.Notes = append(p.stats.Notes, ks.note)
		}
	}
	if opts.JIT != nil {
		p.jitIx = opts.JIT.Index()
	}
	return p
}

// Refresh takes in what the JIT sources gained since (call it after the
// JIT process's Update). Locations already returned stay valid.
func (p *Process) Refresh() {
	if p.opts.JIT == nil {
		return
	}
	ix := p.opts.JIT.Index()
	p.mu.Lock()
	p.jitIx = ix
	p.mu.Unlock()
}

// state returns the symbolization state of a module (p.mu held).
func (p *Process) state(m *addrspace.Module) *mapping {
	if st := p.mods[m]; st != nil {
		return st
	}
	st := &mapping{mod: m}
	st.pub = &model.Mapping{Start: m.Start, Limit: m.End, Offset: m.Offset, File: m.Path, Kind: model.KindNative}
	switch {
	case m.Anon:
		st.pub.File = "[anon]"
		st.pub.Kind = model.KindUnknown
	case m.File == nil && !m.IsFile():
		st.pub.Kind = model.KindUnknown // [vsyscall], [uprobes] and the like
	}
	if m.File != nil {
		st.pub.BuildID = m.File.BuildID
	}
	p.mods[m] = st
	return st
}

// symbols loads a mapping's symbols on first use (p.mu held).
func (st *mapping) symbols(env objfile.Env) *objfile.Symbols {
	if st.loaded {
		return st.syms
	}
	st.loaded = true
	if st.mod.File == nil {
		return nil
	}
	s, err := st.mod.File.Symbols(env)
	if err != nil {
		return nil
	}
	st.syms = s
	st.pub.HasFunctions = s.Len() > 0
	st.pub.HasFilenames = s.HasLines()
	st.pub.HasLineNumbers = s.HasLines()
	st.pub.HasInlineFrames = s.HasInline()
	return s
}

// Mappings returns the target's executable mappings (current and gone),
// then the kernel's and the JIT's pseudo mappings that locations use.
// Their Has* fields are set as files are read: they are final once the
// Locate calls of a capture are done.
func (p *Process) Mappings() []*model.Mapping {
	mods := p.space.Modules()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*model.Mapping
	for _, m := range mods {
		out = append(out, p.state(m).pub)
	}
	if p.kernel != nil {
		out = append(out, p.kernel.used()...)
	}
	if p.jitMap != nil {
		out = append(out, p.jitMap)
	}
	return out
}

// MaxCached bounds the locations Trim lets the caches keep: about a
// hundred bytes each, and more distinct addresses than the code of a
// busy service runs in an hour.
const MaxCached = 1 << 16

// Trim empties the caches of locations once they hold more than max (0:
// MaxCached), so that a target symbolized for days — continuous
// profiling, a JIT that keeps compiling code at new addresses — costs
// what its recent code costs, not every address it ever ran. Locations
// handed out stay valid; the next lookups make new ones. It reports
// whether it emptied them.
func (p *Process) Trim(max int) bool {
	if max <= 0 {
		max = MaxCached
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.jitMore)
	for i := range 2 {
		n += len(p.cache[i]) + len(p.jitLocs[i])
	}
	if n <= max {
		return false
	}
	p.cache = [2]map[uint64]cached{{}, {}}
	p.jitLocs = [2]map[uint64]jitEntry{{}, {}}
	p.jitMore = map[jitKey]*model.Location{}
	return true
}
