package addrspace

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Space is the address space of one target process. It is safe for use
// by several goroutines.
type Space struct {
	pid int
	log *slog.Logger
	env objfile.Env

	mu      sync.RWMutex
	via     int       // the thread /proc files are read through (see procfs.Via)
	cur     []*Module // current executable mappings, sorted by start
	retired []*Module // mappings gone at a Refresh, newest first
	// regions are the current mappings of every kind, adjacent ones
	// merged, sorted: where the target's memory is mapped at all.
	regions [][2]uint64
	files   map[fileKey]*fileEntry
	mem     *Memory
	closed  bool
}

// Module is one executable mapping of the target and the object file
// behind it.
type Module struct {
	procfs.Mapping
	// File is the mapped ELF file, or the vdso read from memory; nil for
	// anonymous memory (where JITs put code), pseudo mappings
	// ([vsyscall]) and files that could not be opened (Err says why).
	File *objfile.File
	Err  error
	// Bias is what to subtract from a run-time address to get the
	// file's link-time address.
	Bias uint64
	// Anon marks anonymous executable memory.
	Anon bool
	// Gone is set once a Refresh found the mapping unmapped; it is kept
	// for code that ran before.
	Gone bool
}

// Name is the module's file as the target names it, or a pseudo name
// ("[anon]", "[vdso]").
func (m *Module) Name() string {
	if m.Anon {
		return "[anon]"
	}
	return m.Path
}

// fileKey identifies a mapped file within one target: its device and
// inode, or a pseudo file's path (the vdso has no inode).
type fileKey struct {
	dev   string
	inode uint64
	path  string
}

// fileEntry is a file opened once for the mappings of it, or why it
// could not be.
type fileEntry struct {
	f   *objfile.File
	err error
}

// Options says where a Space looks for debug files.
type Options struct {
	// DebugDirs: see objfile.Env (nil: /usr/lib/debug).
	DebugDirs []string
	Logger    *slog.Logger
}

// Open reads pid's maps and opens the files of its executable mappings
// (so that a target that exits, or a library replaced on disk, is still
// known). It fails only when the maps cannot be read.
func Open(pid int, opts Options) (*Space, error) {
	s := &Space{pid: pid, log: opts.Logger, files: map[fileKey]*fileEntry{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	via, err := procfs.Via(pid) // its errors name the pid, or its file
	if err != nil {
		return nil, err
	}
	s.via = via
	s.mem = NewMemory(via)
	s.env = objfile.Env{
		DebugDirs: opts.DebugDirs,
		Open:      s.openDebug,
		Key:       strings.Join(opts.DebugDirs, "\x00") + "\x00" + rootID(procfs.PidPath(via, "root")),
		Keep:      s.Alive,
	}
	maps, err := procfs.ReadMaps(via)
	if err != nil {
		// Another user's maps need ptrace access: say how to get it.
		return nil, perms.ProcAccess("read the memory map", err)
	}
	s.setMaps(maps)
	return s, nil
}

// Pid is the target's process id.
func (s *Space) Pid() int { return s.pid }

// Via is the thread the target's /proc files are read through: the pid,
// or a live thread when the main thread exited.
func (s *Space) Via() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.via
}

// Env is how the files' separate debug information is found.
func (s *Space) Env() objfile.Env { return s.env }

// Memory reads the target's memory.
func (s *Space) Memory() *Memory {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mem
}

// Alive reports whether a thread of the target still lives.
func (s *Space) Alive() bool { return procfs.Alive(s.pid) }

// Refresh reads the maps again: new mappings are opened, mappings that
// went away are kept (Gone) for code that ran before. Modules already
// returned stay valid.
func (s *Space) Refresh() error {
	via, err := procfs.Via(s.pid)
	if err != nil {
		return err
	}
	maps, err := procfs.ReadMaps(via)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("addrspace: Refresh after Close")
	}
	if via != s.via {
		s.via, s.mem = via, NewMemory(via)
	}
	s.setMaps(maps)
	return nil
}

// setMaps replaces the current mappings, keeping those that went away
// (s.mu held, or s not yet shared).
func (s *Space) setMaps(maps []procfs.Mapping) {
	old := map[procfs.Mapping]*Module{}
	for _, m := range s.cur {
		old[m.Mapping] = m
	}
	var cur []*Module
	s.regions = s.regions[:0]
	for _, pm := range maps {
		if n := len(s.regions); n > 0 && s.regions[n-1][1] == pm.Start {
			s.regions[n-1][1] = pm.End
		} else if pm.End > pm.Start {
			s.regions = append(s.regions, [2]uint64{pm.Start, pm.End})
		}
		if !pm.Exec() && pm.Path != "[vdso]" {
			continue
		}
		if m, ok := old[pm]; ok {
			cur = append(cur, m)
			delete(old, pm)
			continue
		}
		cur = append(cur, s.newModule(pm))
	}
	gone := make([]*Module, 0, len(old))
	for _, m := range old {
		m.Gone = true
		gone = append(gone, m)
	}
	sort.Slice(gone, func(i, j int) bool { return gone[i].Start < gone[j].Start })
	s.retired = append(gone, s.retired...)
	sort.Slice(cur, func(i, j int) bool { return cur[i].Start < cur[j].Start })
	s.cur = cur
}

// newModule describes one executable mapping and opens its file.
func (s *Space) newModule(pm procfs.Mapping) *Module {
	m := &Module{Mapping: pm}
	var e *fileEntry
	switch {
	case pm.IsFile():
		e = s.openFile(pm)
	case pm.Path == "[vdso]":
		e = s.openVDSO(pm)
	case pm.Path == "":
		m.Anon = true
	}
	if e != nil {
		m.File, m.Err = e.f, e.err
	}
	if m.File != nil {
		m.Bias, _ = m.File.Bias(pm.Start, pm.Offset, pm.Exec())
	}
	return m
}

// openFile opens the file of a mapping once per file identity.
func (s *Space) openFile(pm procfs.Mapping) *fileEntry {
	id := fileKey{dev: pm.Dev, inode: pm.Inode, path: pm.Path}
	if pm.Inode != 0 {
		id.path = ""
	}
	if e, ok := s.files[id]; ok {
		return e
	}
	e := &fileEntry{}
	fd, err := s.openMapped(pm)
	if err == nil {
		e.f, err = objfile.Open(fd, pm.Path)
	}
	if err != nil {
		e.err = err
		s.log.Debug("cannot open mapped file", "pid", s.pid, "file", pm.Path, "err", err)
	}
	s.files[id] = e
	return e
}

// ErrReplaced is wrapped by the error of a mapped file whose path now
// names another file, or none.
var ErrReplaced = errors.New("replaced or deleted since the target mapped it")

// openMapped opens the file behind a mapping: by its path inside the
// target's root when that is still the mapped file (same inode), else
// through /proc/<pid>/map_files, which opens exactly the mapped file even
// when it was deleted or replaced (it needs CAP_SYS_ADMIN).
func (s *Space) openMapped(pm procfs.Mapping) (*os.File, error) {
	var first error
	if !pm.Deleted {
		f, err := procfs.OpenInRoot(s.via, pm.Path, false)
		if err == nil {
			var st unix.Stat_t
			if unix.Fstat(int(f.Fd()), &st) == nil && st.Ino == pm.Inode {
				return f, nil
			}
			f.Close()
			err = fmt.Errorf("%s is not the file the target mapped (inode %d, mapped %d): %w", pm.Path, st.Ino, pm.Inode, ErrReplaced)
		}
		first = err
	} else {
		first = fmt.Errorf("%s was deleted after the target mapped it: %w", pm.Path, ErrReplaced)
	}
	f, err := os.Open(pm.MapFilesPath(s.via))
	if err == nil {
		return f, nil
	}
	if perms.IsPermission(err) {
		return nil, fmt.Errorf("%w; %w", first, perms.Explain(perms.DeletedFiles, "open "+pm.MapFilesPath(s.via), unwrapPath(err)))
	}
	return nil, fmt.Errorf("%w; %s: %w", first, pm.MapFilesPath(s.via), unwrapPath(err))
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// openDebug opens a debug file by its path in the target's mount
// namespace, then by the same path in ours when the roots differ (debug
// files are often installed on the host, not in a container).
func (s *Space) openDebug(name string) (*os.File, error) {
	f, err := procfs.OpenInRoot(s.Via(), name, false)
	if err != nil && !sameFile(procfs.PidPath(s.Via(), "root"), "/") {
		f, err = os.Open(name)
	}
	return f, err
}

func sameFile(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Stat(a, &sa) != nil || unix.Stat(b, &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// rootID identifies the target's root directory (containers have their
// own), so that debug files found inside one are not used for another.
func rootID(path string) string {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// ModuleAt returns the module holding addr, current mappings first, or
// nil.
func (s *Space) ModuleAt(addr uint64) *Module {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := sort.Search(len(s.cur), func(i int) bool { return s.cur[i].End > addr })
	if i < len(s.cur) && s.cur[i].Contains(addr) {
		return s.cur[i]
	}
	for _, m := range s.retired {
		if m.Contains(addr) {
			return m
		}
	}
	return nil
}

// Region returns the mapped region holding addr as the maps said at the
// last Refresh: adjacent mappings of any kind merged (a thread's stack
// and what lies next to it are one region), ok false when none holds it.
func (s *Space) Region(addr uint64) (start, end uint64, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	i := sort.Search(len(s.regions), func(i int) bool { return s.regions[i][1] > addr })
	if i < len(s.regions) && addr >= s.regions[i][0] {
		return s.regions[i][0], s.regions[i][1], true
	}
	return 0, 0, false
}

// Modules returns the current modules, sorted by start, then the gone
// ones, newest first.
func (s *Space) Modules() []*Module {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Module, 0, len(s.cur)+len(s.retired))
	out = append(out, s.cur...)
	return append(out, s.retired...)
}

// Close releases the files. Modules already returned keep what was read.
func (s *Space) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for _, e := range s.files {
		if e.f != nil {
			e.f.Close()
		}
	}
	return nil
}
