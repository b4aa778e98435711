package jit

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Process follows every JIT symbol file of one live process into one
// Index: the jitdumps it maps (or, when it maps none, the usual places a
// runtime writes them) and its perf map. Its methods are safe for
// concurrent use. While the unwinder asks of the GDB JIT interface
// (ReadGDBJIT), a goroutine of its own looks at the interface's list
// every few milliseconds; it ends at Close, or seconds after the last
// ask.
type Process struct {
	pid  int
	opts Options

	mu       sync.Mutex
	closed   bool
	nspid    int
	owners   []uint32  // uids whose files we trust: the target's and root
	started  time.Time // the process's start: older files are not its own
	sources  []*source
	gdb      *gdbSource             // the GDB JIT interface, once WatchGDBJIT found it
	refused  map[string]*SourceInfo // by path, tried again on Update
	searched []string
	looked   map[string]bool
	b        *builder
	// files is set for a Process made of given files (tests): no
	// discovery.
	files bool
}

// OpenProcess finds the symbol files of pid and reads them. Finding none
// is not an error (the runtime may write them later: Update looks
// again); a process that does not exist, or whose /proc files we may not
// read, is.
func OpenProcess(pid int, opts Options) (*Process, error) {
	st, err := procfs.ReadStatus(pid, pid)
	if err != nil {
		return nil, perms.ProcAccess("read the process status", err)
	}
	p := &Process{pid: pid, opts: opts, nspid: st.InnerPid(), refused: map[string]*SourceInfo{}, looked: map[string]bool{}, b: &builder{}}
	p.owners = []uint32{0, st.Uid[0], st.Uid[1], st.Uid[3]}
	p.started = processStart(pid)
	// Whether the map may be read at all (the kernel checks at the
	// open); Update reads it whole, once.
	if _, err := procfs.ReadPrefix(procfs.PidPath(p.via(), "maps"), 1); err != nil {
		return nil, perms.ProcAccess("read the memory map", err)
	}
	// A file that cannot be read says so in its SourceInfo (ReadError);
	// the others still count.
	_ = p.Update()
	return p, nil
}

// Pid is the process's id (in our pid namespace); NSpid the id it sees for
// itself, which names its files.
func (p *Process) Pid() int { return p.pid }

// via is the id to read the process's own /proc files through: a live
// thread when its main thread has exited (see procfs.Via).
func (p *Process) via() int {
	if v, err := procfs.Via(p.pid); err == nil {
		return v
	}
	return p.pid
}
func (p *Process) NSpid() int { return p.nspid }

// Update looks for new files and reads what was appended to known ones
// since the last call. When nothing changed it costs a few system calls
// per file. A file that shrank or was replaced is read again from its
// start (and the index rebuilt). A process that exited is not an error:
// the files already open stay readable.
func (p *Process) Update() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("jit: Update on a closed Process")
	}
	if !p.files {
		p.discover()
	}
	rebuild := false
	var errs []error
	for _, s := range p.sources {
		r, err := s.replaced()
		if err != nil {
			errs = append(errs, err)
		}
		rebuild = rebuild || r
	}
	if rebuild {
		p.b = &builder{}
		for _, s := range p.sources {
			s.reset()
		}
		if p.gdb != nil {
			p.gdb.reset()
		}
	}
	for _, s := range p.sources {
		err := s.ingest(p.b, false)
		s.info.ReadError = ""
		if err != nil {
			s.info.ReadError = err.Error()
			errs = append(errs, err)
		}
	}
	if p.gdb != nil {
		// The list is read without stopping the JIT, which may be
		// changing it: what failed is read again next time.
		err := p.gdb.ingest(p.b)
		p.gdb.info.ReadError = ""
		if err != nil {
			p.gdb.info.ReadError = err.Error()
		}
	}
	return errors.Join(errs...)
}

// ReadGDBJIT looks at the GDB JIT interface's list again for a sample at
// time t (CLOCK_MONOTONIC) newer than the last look — the whole list when
// it was last read more than minGap ago (longer for a long list), else its
// head, for what was registered since — and reports whether the index
// changed since the last call: what the unwinder asks before it trusts
// the JIT code it finds at a sample's time (cheaper than Update, which
// reads the files too). While such calls keep coming, the list is also
// looked at every gdbFollowEvery by a goroutine of its own (followGDB).
func (p *Process) ReadGDBJIT(t uint64, minGap uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.gdb
	if g == nil || p.closed {
		return false
	}
	g.asked = g.now()
	if !g.following && g.follow > 0 {
		g.following = true
		go p.followGDB(g, minGap)
	}
	if g.looked < t {
		p.lookGDB(g, minGap)
	}
	changed := p.b.n != g.reported
	g.reported = p.b.n
	return changed
}

// ReadGDBJITHead looks at the head of the GDB JIT interface's list for a
// sample at t newer than the last look, however soon after it (what a
// sample in code the index does not have asks: code registered since the
// last look is at the head), and reports whether the index changed since
// the last call of it or ReadGDBJIT.
func (p *Process) ReadGDBJITHead(t uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.gdb
	if g == nil || p.closed {
		return false
	}
	if g.looked < t {
		g.ingestHead(p.b)
	}
	changed := p.b.n != g.reported
	g.reported = p.b.n
	return changed
}

// GDBJITLooked is when the GDB JIT interface's list was last looked at
// (0: never, or the process has none): the index has every object
// registered before then.
func (p *Process) GDBJITLooked() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gdb == nil {
		return 0
	}
	return p.gdb.looked
}

// lookGDB has g look at its list (p.mu held), keeping the whole read's
// error.
func (p *Process) lookGDB(g *gdbSource, minGap uint64) {
	whole, err := g.look(p.b, minGap)
	if whole {
		g.info.ReadError = ""
		if err != nil {
			g.info.ReadError = err.Error()
		}
	}
}

// followGDB looks at g's list for as long as the unwinder keeps asking
// (ReadGDBJIT) and the Process is open, whenever no walk looked for
// g.follow. Looks made only as samples are unwound come late when the
// sampler's reader falls behind on a loaded host, and an object the JIT
// registers, runs and frees between two of them (a PostgreSQL query's, a
// fraction of a second) is then never read: its samples find no code.
// While walks keep the pace themselves, the goroutine wakes less often,
// down to once per gdbFollowMax.
func (p *Process) followGDB(g *gdbSource, minGap uint64) {
	every := g.follow
	timer := time.NewTimer(every)
	defer timer.Stop()
	for range timer.C {
		p.mu.Lock()
		now := g.now()
		if p.closed || p.gdb != g || now-g.asked > uint64(g.followIdle) {
			g.following = false
			p.mu.Unlock()
			return
		}
		if now-g.looked < uint64(every) {
			every = min(2*every, max(g.follow, gdbFollowMax)) // walks keep the pace
		} else {
			every = g.follow
			p.lookGDB(g, minGap)
		}
		p.mu.Unlock()
		timer.Reset(every)
	}
}

// WatchGDBJIT reads, at this Update and the next, the objects the
// process registers with the GDB JIT interface whose descriptor is at
// desc in its memory (package target finds it: the exported symbol
// __jit_debug_descriptor): their functions are indexed with their call
// frame information. A second call for the same descriptor does nothing.
func (p *Process) WatchGDBJIT(mem Memory, desc uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gdb == nil || p.gdb.desc != desc {
		p.gdb = newGDBSource(mem, desc)
	}
}

// Forget says that no lookup will be made at a time before horizon
// (CLOCK_MONOTONIC ns) from now on: the code that later code replaced
// before it may go (SourceInfo.Retired), so that the index of a process
// followed for days holds the code live now and what was replaced since
// the horizon. The Index returned next may be smaller; those handed out
// before keep what they hold.
func (p *Process) Forget(horizon uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.b.forget(horizon)
	for _, s := range p.sources {
		s.syncLosses(p.b)
	}
}

// Index returns the index of everything read so far. It does not change
// when Update reads more: call Index again.
func (p *Process) Index() *Index {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.b.index()
}

// Sources describes every file found: those read, then those refused.
func (p *Process) Sources() []SourceInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]SourceInfo, 0, len(p.sources)+len(p.refused)+1)
	for _, s := range p.sources {
		out = append(out, s.info)
	}
	if p.gdb != nil {
		out = append(out, p.gdb.info)
	}
	for _, path := range p.searched {
		if r, ok := p.refused[path]; ok {
			out = append(out, *r)
		}
	}
	return out
}

// Searched lists the paths (in the target's mount namespace) discovery
// looked at, found or not: what to tell a user who expected symbols.
func (p *Process) Searched() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.searched...)
}

// Close closes the files. The Indexes handed out stay usable.
func (p *Process) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	var errs []error
	for _, s := range p.sources {
		if err := s.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// jitdumpName matches the file names jitdump writers use.
var jitdumpName = regexp.MustCompile(`^jit-[0-9]+\.dump$`)

// candidate is a file discovery may read.
type candidate struct {
	path, how string
	kind      SourceKind
	open      func() (*os.File, error)
	reopen    bool // the path may later name another file
	// mapped files are the process's own for sure; others must not be
	// older than the process (a file left by an earlier process that had
	// the same pid).
	mapped bool
}

// discover adds the files found since the last call.
func (p *Process) discover() {
	var cands []candidate
	if !p.opts.NoJitdump {
		mapped := p.mappedJitdumps()
		cands = append(cands, mapped...)
		if len(mapped) == 0 && !p.haveJitdump() {
			cands = append(cands, p.jitdumpGuesses()...)
		}
	}
	if !p.opts.NoPerfMap {
		cands = append(cands, p.inRoot(path.Join("/tmp", "perf-"+strconv.Itoa(p.nspid)+".map"), "perf map", KindPerfMap))
	}
	for _, c := range cands {
		p.consider(c)
	}
}

func (p *Process) haveJitdump() bool {
	for _, s := range p.sources {
		if s.info.Kind == KindJitdump {
			return true
		}
	}
	return false
}

// mappedJitdumps finds the jit-<pid>.dump files the process maps: writers
// map a page of the file so that perf sees it.
func (p *Process) mappedJitdumps() []candidate {
	via := p.via()
	maps, err := procfs.ReadMaps(via)
	if err != nil {
		return nil // exited, or unreadable: OpenProcess reported that
	}
	var out []candidate
	seen := map[string]bool{}
	for _, m := range maps {
		if !jitdumpName.MatchString(path.Base(m.Path)) || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		if m.Deleted {
			// Gone from the file system (V8's --perf-prof-delete-file):
			// the kernel still opens it by the mapping.
			mf := m.MapFilesPath(via)
			out = append(out, candidate{path: m.Path, how: "maps (deleted)", kind: KindJitdump, mapped: true,
				open: func() (*os.File, error) { return os.Open(mf) }})
			continue
		}
		c := p.inRoot(m.Path, "maps", KindJitdump)
		c.mapped = true
		out = append(out, c)
	}
	return out
}

// jitdumpGuesses lists where runtimes write jitdumps when the process maps
// none: its cwd and /tmp (Wasmtime, .NET, CPython), and LLVM's
// .debug/jit/<dir>/ under $JITDUMPDIR or $HOME (Julia), then Options.Dirs.
func (p *Process) jitdumpGuesses() []candidate {
	name := "jit-" + strconv.Itoa(p.nspid) + ".dump"
	var out []candidate
	add := func(dir, how string) {
		out = append(out, p.inRoot(path.Join(dir, name), how, KindJitdump))
	}
	via := p.via()
	cwd, err := procfs.Cwd(via)
	if err == nil {
		add(cwd, "cwd")
	}
	add("/tmp", "/tmp")
	env, _ := procfs.Environ(via)
	// The runtime resolved relative directories against its cwd.
	abs := func(d string) string {
		if d == "" || path.IsAbs(d) || cwd == "" {
			return d
		}
		return path.Join(cwd, d)
	}
	if d := abs(env["JITDUMPDIR"]); path.IsAbs(d) {
		add(d, "$JITDUMPDIR")
		for _, sub := range p.subdirs(path.Join(d, ".debug", "jit")) {
			add(sub, "$JITDUMPDIR")
		}
	}
	if h := abs(env["HOME"]); path.IsAbs(h) {
		for _, sub := range p.subdirs(path.Join(h, ".debug", "jit")) {
			add(sub, "$HOME/.debug/jit")
		}
	}
	for _, d := range p.opts.Dirs {
		add(d, "option")
	}
	return out
}

// maxSubdirs bounds the .debug/jit directories looked into: every run of
// an LLVM JIT leaves one behind.
const maxSubdirs = 4096

// subdirs lists the directories in dir, inside the target's root.
func (p *Process) subdirs(dir string) []string {
	f, err := procfs.OpenInRoot(p.via(), dir, false)
	if err != nil {
		return nil
	}
	defer f.Close()
	ents, err := f.ReadDir(maxSubdirs)
	if err != nil && len(ents) == 0 {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, path.Join(dir, e.Name()))
		}
	}
	return out
}

// inRoot is a candidate opened through the target's root, refusing a
// symbolic link as the last component.
func (p *Process) inRoot(name, how string, kind SourceKind) candidate {
	return candidate{path: name, how: how, kind: kind, reopen: true,
		open: func() (*os.File, error) { return procfs.OpenInRoot(p.via(), name, true) }}
}

// consider opens a candidate and, if it is trusted and new, follows it.
func (p *Process) consider(c candidate) {
	if p.known(c.path) {
		return
	}
	if !p.looked[c.path] {
		p.looked[c.path] = true
		p.searched = append(p.searched, c.path)
	}
	f, err := c.open()
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			delete(p.refused, c.path)
			return
		}
		p.refuse(c, openRefusal(err))
		return
	}
	if reason := p.trust(f, c.mapped); reason != "" {
		f.Close()
		p.refuse(c, reason)
		return
	}
	s, err := newSource(f, c.kind, c.path, c.how)
	if err != nil {
		f.Close()
		p.refuse(c, err.Error())
		return
	}
	for _, o := range p.sources {
		if o.dev == s.dev && o.ino == s.ino {
			s.close() // the same file under another name
			return
		}
	}
	delete(p.refused, c.path)
	s.configure(p.opts)
	s.trust = func(f *os.File) string { return p.trust(f, c.mapped) }
	if c.reopen {
		s.reopen = c.open
	}
	p.sources = append(p.sources, s)
}

func (p *Process) known(path string) bool {
	for _, s := range p.sources {
		if s.info.Path == path {
			return true
		}
	}
	return false
}

func (p *Process) refuse(c candidate, reason string) {
	p.refused[c.path] = &SourceInfo{Path: c.path, Kind: c.kind, How: c.how, Refused: true, Reason: reason}
}

func openRefusal(err error) string {
	switch {
	case errors.Is(err, unix.ELOOP):
		return "a symbolic link: refused, it could point at any file in the target's root"
	case errors.Is(err, unix.EXDEV):
		return "its path leaves the target's root: refused"
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return fmt.Sprintf("cannot open it: %v (run as the target's user or root)", err)
	}
	return fmt.Sprintf("cannot open it: %v", err)
}

// trust says why an open file may not be read, or "" when it may: it must
// be a regular file owned by the target's user or root, and not older than
// the process unless the process maps it.
func (p *Process) trust(f *os.File, mapped bool) string {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Sprintf("cannot stat it: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Sprintf("not a regular file (mode %#o)", st.Mode&unix.S_IFMT)
	}
	owned := false
	for _, u := range p.owners {
		owned = owned || st.Uid == u
	}
	if !owned {
		return fmt.Sprintf("owned by uid %d, neither the target's user (uid %d) nor root", st.Uid, p.owners[2])
	}
	if !mapped && !p.started.IsZero() {
		mtime := time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
		if mtime.Before(p.started.Add(-2 * time.Second)) {
			return fmt.Sprintf("last written %s, before the process started (%s): left by an earlier process with the same pid",
				mtime.Format(time.RFC3339), p.started.Format(time.RFC3339))
		}
	}
	return ""
}

// processStart is when pid started, on the wall clock (file times are on
// it); zero when unknown.
func processStart(pid int) time.Time {
	st, err := procfs.ReadStat(pid, pid)
	if err != nil {
		return time.Time{}
	}
	var boot unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil {
		return time.Time{}
	}
	sinceBoot := time.Duration(st.StartTime) * time.Second / procfs.ClockTicks
	up := time.Duration(boot.Nano())
	return time.Now().Add(sinceBoot - up)
}

// MapEntry is one code range a reader of the target's memory named.
type MapEntry struct {
	Start, Size uint64
	Name        string // as the runtime spells it in its own perf map
}

// SetMemoryMap makes entries a symbol source of the process, named path
// (not a file of the target's: "[memory: the JVM's code cache]"), read as
// a perf map: the names a reader of the target's memory found, where the
// runtime wrote no file. A later call replaces the source. It is indexed
// at the next Update.
func (p *Process) SetMemoryMap(path string, entries []MapEntry) error {
	f, err := memoryFile(path, entries)
	if err != nil {
		return err
	}
	s, err := newSource(f, KindPerfMap, path, "memory")
	if err != nil {
		f.Close()
		return err
	}
	s.configure(p.opts)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		s.close()
		return errors.New("jit: SetMemoryMap on a closed Process")
	}
	kept := p.sources[:0]
	replaced := false
	for _, o := range p.sources {
		if o.info.Path == path {
			o.close()
			replaced = true
			continue
		}
		kept = append(kept, o)
	}
	p.sources = append(kept, s)
	if replaced {
		// What the old source indexed must go: read everything again.
		p.b = &builder{}
		for _, o := range p.sources {
			o.reset()
		}
	}
	return nil
}

// memoryFile writes entries as perf map lines into an anonymous file.
func memoryFile(name string, entries []MapEntry) (*os.File, error) {
	fd, err := unix.MemfdCreate("stallwatch-map", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%s: memfd_create: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	w := bufio.NewWriter(f)
	var line []byte
	for _, e := range entries {
		line = strconv.AppendUint(line[:0], e.Start, 16)
		line = append(line, ' ')
		line = strconv.AppendUint(line, e.Size, 16)
		line = append(line, ' ')
		line = appendMapName(line, e.Name)
		line = append(line, '\n')
		w.Write(line)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}
