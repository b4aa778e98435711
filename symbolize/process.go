package symbolize

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/jit"
	"golang.org/x/sys/unix"
)

// Process resolves addresses of one target process. It is safe for use by
// several goroutines.
//
// NewProcess reads the target's maps and opens the files of its
// executable mappings (so that a target that exits, or a library replaced
// on disk, still resolves); symbol tables and line tables are read the
// first time an address falls in a file, once per file.
type Process struct {
	pid       int
	opts      Options
	log       *slog.Logger
	debugDirs []string
	sameRoot  bool   // the target's root is ours: no second look on the host
	rootID    string // identifies the target's root, for the file cache

	mu      sync.Mutex
	maps    []*mapping // current executable mappings, sorted by start
	retired []*mapping // mappings gone at a Refresh, for code unmapped since
	objs    map[fileID]*objEntry
	kernel  *kernelSyms
	jit     *jitProcess
	jitMap  *Mapping
	// Caches, indexed by Addr.Return: uint64 keys take the maps' fast
	// path, which a struct key would not.
	cache   [2]map[uint64]cached    // user addresses
	kcache  [2]map[uint64]*Location // kernel addresses
	jitLocs [2]map[uint64]jitEntry  // JIT code, by address
	jitMore map[jitKey]*Location    // JIT code at an address that held several
	kframes map[procfs.KernelFrame]*Location
	stats   Stats
	closed  bool
}

// mapping is one executable mapping of the target.
type mapping struct {
	pm      procfs.Mapping
	pub     *Mapping
	obj     *objEntry // nil: anonymous or pseudo
	bias    uint64
	anon    bool // anonymous executable memory: where JITs put code
	addrs   int
	unnamed int
}

// objEntry is an opened file (or the reason it could not be opened),
// shared by the mappings of one file.
type objEntry struct {
	o   *objFile
	err error
}

type fileID struct {
	dev   string
	inode uint64
	path  string // pseudo files (vdso) have no inode
}

type cached struct {
	loc *Location
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
	loc *Location
}

type jitKey struct {
	pc  uint64
	ret bool
	sym *jit.Symbol
}

// NewProcess reads the target's maps and opens the files it has mapped
// executable, its kernel symbol table (Options.Kernel) and its JIT
// sources (Options.JIT). It fails only when the target's maps cannot be
// read; anything else missing is counted in Stats.
func NewProcess(pid int, opts Options) (*Process, error) {
	return newProcess(pid, opts, nil)
}

// newProcess takes the kernel symbols from ks when not nil (tests).
func newProcess(pid int, opts Options, ks *kernelSyms) (*Process, error) {
	p := &Process{
		pid:       pid,
		opts:      opts,
		log:       opts.Logger,
		debugDirs: opts.DebugDirs,
		objs:      map[fileID]*objEntry{},
		cache:     [2]map[uint64]cached{{}, {}},
		kcache:    [2]map[uint64]*Location{{}, {}},
		jitLocs:   [2]map[uint64]jitEntry{{}, {}},
		jitMore:   map[jitKey]*Location{},
		kframes:   map[procfs.KernelFrame]*Location{},
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.debugDirs == nil {
		p.debugDirs = DefaultDebugDirs
	}
	p.sameRoot = sameFile(procfs.PidPath(pid, "root"), "/")
	p.rootID = rootID(procfs.PidPath(pid, "root"))
	maps, err := procfs.ReadMaps(pid)
	if err != nil {
		// Another user's maps need ptrace access: say how to get it.
		return nil, perms.ProcAccess(fmt.Sprintf("read maps of pid %d", pid), err)
	}
	p.setMaps(maps)
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
	if opts.JIT {
		j, err := openJIT(pid)
		if err != nil {
			p.stats.Notes = append(p.stats.Notes, fmt.Sprintf("JIT sources of pid %d: %v", pid, err))
		} else {
			p.jit = j
		}
	}
	return p, nil
}

func sameFile(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Stat(a, &sa) != nil || unix.Stat(b, &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// Refresh reads the target's maps again at the end of a capture: new
// mappings are opened, mappings that went away are kept for code that
// ran before it was unmapped, and the JIT sources read what was appended.
// Locations already returned stay valid.
func (p *Process) Refresh() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("symbolize: Refresh after Close")
	}
	var errs []error
	maps, err := procfs.ReadMaps(p.pid)
	if err != nil {
		errs = append(errs, fmt.Errorf("symbolize pid %d: %w", p.pid, err))
	} else {
		p.setMaps(maps)
	}
	if p.jit != nil {
		if err := p.jit.update(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setMaps replaces the current mappings, keeping those that went away.
func (p *Process) setMaps(maps []procfs.Mapping) {
	old := map[procfs.Mapping]*mapping{}
	for _, m := range p.maps {
		old[m.pm] = m
	}
	var cur []*mapping
	for _, pm := range maps {
		if !pm.Exec() && pm.Path != "[vdso]" {
			continue
		}
		if m, ok := old[pm]; ok {
			cur = append(cur, m)
			delete(old, pm)
			continue
		}
		cur = append(cur, p.newMapping(pm))
	}
	gone := make([]*mapping, 0, len(old))
	for _, m := range old {
		gone = append(gone, m)
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].pm.Start < gone[j].pm.Start })
	p.retired = append(gone, p.retired...)
	sort.Slice(cur, func(i, j int) bool { return cur[i].pm.Start < cur[j].pm.Start })
	p.maps = cur
}

// newMapping describes one executable mapping and opens its file.
func (p *Process) newMapping(pm procfs.Mapping) *mapping {
	m := &mapping{pm: pm}
	m.pub = &Mapping{Start: pm.Start, Limit: pm.End, Offset: pm.Offset, File: pm.Path, Kind: KindNative}
	switch {
	case pm.IsFile():
		m.obj = p.openFile(pm)
	case pm.Path == "[vdso]":
		m.obj = p.openVDSO(pm)
	case pm.Path == "":
		m.anon = true
		m.pub.File = "[anon]"
		m.pub.Kind = KindUnknown
	default:
		m.pub.Kind = KindUnknown // [vsyscall], [uprobes] and the like
	}
	if m.obj != nil && m.obj.o != nil {
		o := m.obj.o
		m.pub.BuildID = o.buildID
		m.bias, _ = o.bias(pm.Start, pm.Offset, pm.Exec())
	}
	return m
}

// openFile opens the file of a mapping once per file identity.
func (p *Process) openFile(pm procfs.Mapping) *objEntry {
	id := fileID{dev: pm.Dev, inode: pm.Inode, path: pm.Path}
	if pm.Inode != 0 {
		id.path = ""
	}
	if e, ok := p.objs[id]; ok {
		return e
	}
	e := &objEntry{}
	f, err := p.openMapped(pm)
	if err == nil {
		e.o, err = openObjFile(pm.Path, f)
	}
	if err != nil {
		e.err = err
		p.log.Debug("symbolize: cannot open mapped file", "pid", p.pid, "file", pm.Path, "err", err)
	}
	p.objs[id] = e
	return e
}

// openMapped opens the file behind a mapping: by its path inside the
// target's root when that is still the mapped file (same inode), else
// through /proc/<pid>/map_files, which opens exactly the mapped file even
// when it was deleted or replaced (it needs CAP_SYS_ADMIN).
func (p *Process) openMapped(pm procfs.Mapping) (*os.File, error) {
	var first error
	if !pm.Deleted {
		f, err := procfs.OpenInRoot(p.pid, pm.Path, false)
		if err == nil {
			var st unix.Stat_t
			if unix.Fstat(int(f.Fd()), &st) == nil && st.Ino == pm.Inode {
				return f, nil
			}
			f.Close()
			err = fmt.Errorf("%s is not the file the target mapped (inode %d, mapped %d): replaced since it was loaded", pm.Path, st.Ino, pm.Inode)
		}
		first = err
	} else {
		first = fmt.Errorf("%s was deleted after the target mapped it", pm.Path)
	}
	f, err := os.Open(pm.MapFilesPath(p.pid))
	if err == nil {
		return f, nil
	}
	return nil, fmt.Errorf("%w; %s: %v (reading a deleted or replaced file needs CAP_SYS_ADMIN)", first, pm.MapFilesPath(p.pid), unwrapPath(err))
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Mappings returns the target's executable mappings (current and gone),
// then the kernel's and the JIT's pseudo mappings that locations use.
// Their Has* fields are set as files are read: they are final once the
// Locate calls of a capture are done.
func (p *Process) Mappings() []*Mapping {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*Mapping
	for _, m := range p.maps {
		out = append(out, m.pub)
	}
	for _, m := range p.retired {
		out = append(out, m.pub)
	}
	if p.kernel != nil {
		out = append(out, p.kernel.used()...)
	}
	if p.jitMap != nil {
		out = append(out, p.jitMap)
	}
	return out
}

// Close releases the files and JIT sources. Locations already returned
// stay valid; Locate after Close still answers from what was read.
func (p *Process) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	for _, e := range p.objs {
		if e.o != nil {
			e.o.close()
		}
	}
	if p.jit != nil {
		return p.jit.close()
	}
	return nil
}

// mappingAt returns the mapping holding addr, current ones first.
func (p *Process) mappingAt(addr uint64) *mapping {
	i := sort.Search(len(p.maps), func(i int) bool { return p.maps[i].pm.End > addr })
	if i < len(p.maps) && p.maps[i].pm.Contains(addr) {
		return p.maps[i]
	}
	for _, m := range p.retired {
		if m.pm.Contains(addr) {
			return m
		}
	}
	return nil
}

// readMem reads n bytes of the target's memory at addr.
func readMem(pid int, addr uint64, n int) ([]byte, error) {
	f, err := os.Open(procfs.PidPath(pid, "mem"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, int64(addr)); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}
