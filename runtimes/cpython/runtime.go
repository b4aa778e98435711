package cpython

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Image is one object file the target maps: its executable (a static
// build such as Debian's python3 holds the interpreter) or a shared
// library (libpython3.X.so in a shared build; libc, whose descriptor of
// struct pthread says where a thread's kernel id lies).
type Image struct {
	// Path is the file as the target maps it. Its name gives the
	// version when nothing in memory does (python3.9, libpython3.10.so.1.0).
	Path    string
	Symbols Symbols
	// Sections are where the image's sections lie at run time; Open
	// looks for _PyRuntime in .PyRuntime (3.11+), .data and .bss when no
	// symbol names it.
	Sections []Section
}

// Symbols looks up a symbol the image defines (the dynamic symbols, and
// .symtab's where the file has them), by name.
type Symbols interface {
	// Symbol returns the run-time address and size of name; false when
	// the image does not define it.
	Symbol(name string) (addr, size uint64, ok bool)
}

// Section is one section of an image at run time.
type Section struct {
	Name       string
	Addr, Size uint64
	Writable   bool
}

// Options bound what is read.
type Options struct {
	// MaxDepth bounds the frames read of one thread (default 1024).
	MaxDepth int
	// MaxThreads bounds the thread states read (default 65536).
	MaxThreads int
	// TIDs are the process's kernel thread ids. 3.8–3.10 thread states
	// have no native_thread_id; glibc's descriptor of struct pthread
	// (_thread_db_pthread_tid) says where its tid lies, and without it
	// the offset is found by matching the thread states' pthread
	// structures with these.
	TIDs []int
}

// Runtime is the CPython runtime of one target process: where
// _PyRuntime is, its version and the layout of its structures. Its
// methods read the target's memory afresh at each call. A Runtime is safe
// for use by several goroutines (one reads at a time).
type Runtime struct {
	mu      sync.Mutex
	r       reader
	version Version
	from    string // how the version was learnt
	l       *Layout
	addr    uint64 // _PyRuntime
	image   string // the image that holds it
	types   typeAddrs
	none    uint64 // &_Py_NoneStruct, the f_executable of 3.13's shim frames
	opts    Options
	notes   []string

	eval []Range // the code of the evaluation function

	tidOffset int64 // where struct pthread holds the tid; -1: unknown
	tidFrom   string

	codes     map[uint64]*codeInfo
	codeBytes int
	now       func() time.Time
	typeNames map[uint64]string
	seen      map[uint64]struct{}

	codeBuf  []byte
	frameBuf [128]byte
	strBuf   [128]byte
	typeBuf  [64]byte
	bytesBuf [64]byte
}

// Version is the target's CPython version.
func (rt *Runtime) Version() Version { return rt.version }

// Address is where _PyRuntime lies in the target.
func (rt *Runtime) Address() uint64 { return rt.addr }

// Image is the path of the object file that holds the interpreter.
func (rt *Runtime) Image() string { return rt.image }

// Layout is the layout the runtime is read with.
func (rt *Runtime) Layout() Layout { return *rt.l }

// Reads counts the reads of the target's memory made so far.
func (rt *Runtime) Reads() uint64 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.r.total
}

// Notes say what a reader should know of how the runtime was found: the
// version's source, offsets _Py_DebugOffsets gave that differ from the
// table, a kernel thread id that cannot be matched.
func (rt *Runtime) Notes() []string { return append([]string(nil), rt.notes...) }

// Open finds the CPython runtime among the target's images and learns
// its version. It fails with ErrNotPython when no image holds one, a
// *VersionError for a version it does not read, or a *ReadError when the
// runtime's memory cannot be read.
func Open(mem Memory, images []Image, opts Options) (*Runtime, error) {
	rt := newRuntime(mem, opts)
	img, addr, how := findRuntime(images)
	if img == nil {
		return nil, ErrNotPython
	}
	rt.image = img.Path
	if err := rt.learnVersion(img, addr, images); err != nil {
		return nil, err
	}
	if addr == 0 {
		var err error
		if addr, err = rt.scan(img); err != nil {
			return nil, err
		}
		how = "found by its contents in " + img.Path
	}
	rt.addr = addr
	rt.notes = append(rt.notes, fmt.Sprintf("CPython %s (version from %s), _PyRuntime at %#x (%s)", rt.version, rt.from, addr, how))
	if rt.version.Minor >= 13 {
		if err := rt.useDebugOffsets(); err != nil {
			return nil, err
		}
	}
	rt.findTypes(img, images)
	rt.findTIDOffset(images)
	rt.findEval(img)
	return rt, nil
}

// EvalFunctions are the interpreter's functions that run Python frames:
// a native frame in one of them stands for the Python frames of one
// evaluation call (Frame.Entry). The .cold part is the same function's
// code moved away by the compiler.
var EvalFunctions = []string{"_PyEval_EvalFrameDefault", "_PyEval_EvalFrameDefault.cold"}

// IsEvalFunction says whether a native function (as a symbol table names
// it) is one of EvalFunctions.
func IsEvalFunction(name string) bool {
	for _, f := range EvalFunctions {
		if name == f {
			return true
		}
	}
	return false
}

// findEval learns where the evaluation function's code lies.
func (rt *Runtime) findEval(img *Image) {
	if img.Symbols == nil {
		return
	}
	for _, name := range EvalFunctions {
		if a, size, ok := img.Symbols.Symbol(name); ok && size > 0 {
			rt.eval = append(rt.eval, Range{Addr: a, Size: size})
		}
	}
	if len(rt.eval) == 0 {
		rt.notes = append(rt.notes, "_PyEval_EvalFrameDefault is not exported: native stacks cannot be told to run Python code by their addresses")
	}
}

// InEval says whether a native code address lies in the evaluation
// function: a stack with such a frame runs Python code.
func (rt *Runtime) InEval(addr uint64) bool {
	for _, r := range rt.eval {
		if r.Contains(addr) {
			return true
		}
	}
	return false
}

func newRuntime(mem Memory, opts Options) *Runtime {
	if opts.MaxDepth <= 0 {
		opts.MaxDepth = 1024
	}
	if opts.MaxThreads <= 0 {
		opts.MaxThreads = 65536
	}
	rt := &Runtime{
		r: reader{mem: mem}, opts: opts, tidOffset: -1,
		codes: map[uint64]*codeInfo{}, typeNames: map[uint64]string{}, seen: map[uint64]struct{}{},
		now: time.Now,
	}
	rt.r.reset(4096)
	return rt
}

// findRuntime picks the image that holds the interpreter and, when it
// can be known without reading memory, where _PyRuntime is: the symbol
// (exported by every build, static or shared, Debian's stripped one
// included), else the start of the .PyRuntime section (3.11+); else 0,
// for an image whose name says CPython and whose data must be scanned.
func findRuntime(images []Image) (*Image, uint64, string) {
	for i := range images {
		if images[i].Symbols == nil {
			continue
		}
		if a, _, ok := images[i].Symbols.Symbol("_PyRuntime"); ok && a != 0 {
			return &images[i], a, "symbol _PyRuntime in " + images[i].Path
		}
	}
	for i := range images {
		for _, s := range images[i].Sections {
			if s.Name == ".PyRuntime" && s.Addr != 0 {
				return &images[i], s.Addr, "section .PyRuntime of " + images[i].Path
			}
		}
	}
	// A shared build's executable is named python3.X too, but holds no
	// interpreter: the library goes first.
	var named *Image
	for i := range images {
		if _, ok := versionFromName(images[i].Path); ok {
			if named == nil || strings.Contains(images[i].Path, "libpython") {
				named = &images[i]
			}
		}
	}
	return named, 0, ""
}

// learnVersion reads the version from _Py_DebugOffsets (3.13+), else
// from Py_Version (3.11+), else from the image's name, and picks the
// layout.
func (rt *Runtime) learnVersion(img *Image, addr uint64, images []Image) error {
	var b [debugHeader]byte
	if addr != 0 && rt.r.read(b[:], addr) == nil {
		if d, ok := parseDebugHeader(b[:]); ok {
			rt.version, rt.from = d.version, "_Py_DebugOffsets"
			if d.freeThreaded {
				return &VersionError{Version: d.version, From: rt.from, Reason: "a free-threaded build"}
			}
			return rt.pickLayout()
		}
	}
	if img.Symbols != nil {
		if a, _, ok := img.Symbols.Symbol("Py_Version"); ok {
			var v [8]byte
			if err := rt.r.read(v[:], a); err != nil {
				return &ReadError{What: "Py_Version", Addr: a, Err: err}
			}
			rt.version, rt.from = fromHex(uint64(binary.LittleEndian.Uint32(v[:]))), "Py_Version"
			return rt.pickLayout()
		}
	}
	if v, ok := versionFromName(img.Path); ok {
		rt.version, rt.from = v, "the file name "+img.Path
		return rt.pickLayout()
	}
	return &VersionError{From: "nothing: " + img.Path + " has no _Py_DebugOffsets, no Py_Version and no version in its name"}
}

func (rt *Runtime) pickLayout() error {
	l, ok := layouts[rt.version.Minor]
	if rt.version.Major != 3 || !ok {
		return &VersionError{Version: rt.version, From: rt.from}
	}
	rt.l = l
	rt.codeBuf = make([]byte, 0, l.CodeSize)
	return nil
}

// useDebugOffsets reads 3.13's _Py_DebugOffsets and takes its offsets in
// place of the table's.
func (rt *Runtime) useDebugOffsets() error {
	b := make([]byte, debugOffsetsSize313)
	if err := rt.r.read(b, rt.addr); err != nil {
		return &ReadError{What: "_Py_DebugOffsets", Addr: rt.addr, Err: err}
	}
	if _, ok := parseDebugHeader(b); !ok {
		// Found by name or scan without the cookie: the table alone.
		rt.notes = append(rt.notes, "no _Py_DebugOffsets at _PyRuntime: offsets from the 3.13 table")
		return nil
	}
	l, differ, err := applyDebugOffsets(rt.l, b)
	if err != nil {
		return &CorruptError{What: "_Py_DebugOffsets", Addr: rt.addr, Detail: err.Error()}
	}
	rt.l = l
	if len(differ) > 0 {
		rt.notes = append(rt.notes, "_Py_DebugOffsets differs from the 3.13 table (its offsets are used): "+strings.Join(differ, ", "))
	}
	return nil
}

// findTypes looks up the type objects that tell a code object, a str,
// bytes and a frame object from garbage.
func (rt *Runtime) findTypes(img *Image, images []Image) {
	lookup := func(name string) uint64 {
		for _, im := range append([]Image{*img}, images...) {
			if im.Symbols == nil {
				continue
			}
			if a, _, ok := im.Symbols.Symbol(name); ok {
				return a
			}
		}
		return 0
	}
	rt.types = typeAddrs{
		code: lookup("PyCode_Type"), unicode: lookup("PyUnicode_Type"),
		bytes: lookup("PyBytes_Type"), frame: lookup("PyFrame_Type"),
	}
	rt.none = lookup("_Py_NoneStruct")
	if rt.types.code == 0 {
		rt.notes = append(rt.notes, "PyCode_Type is not exported: objects are told apart by their type's tp_name")
	}
}

// findTIDOffset reads glibc's descriptor of struct pthread's tid field
// (_thread_db_pthread_tid: its size in bits, count and offset, for
// libthread_db), for 3.8–3.10 thread states, which give only
// pthread_self().
func (rt *Runtime) findTIDOffset(images []Image) {
	if rt.l.ThreadNativeID >= 0 {
		return
	}
	for _, im := range images {
		if im.Symbols == nil {
			continue
		}
		a, _, ok := im.Symbols.Symbol("_thread_db_pthread_tid")
		if !ok {
			continue
		}
		var d [12]byte
		if err := rt.r.read(d[:], a); err != nil {
			continue
		}
		bits, count, off := binary.LittleEndian.Uint32(d[0:]), binary.LittleEndian.Uint32(d[4:]), binary.LittleEndian.Uint32(d[8:])
		if bits == 32 && count == 1 && off < 4096 && off%4 == 0 {
			rt.tidOffset, rt.tidFrom = int64(off), "glibc's _thread_db_pthread_tid in "+im.Path
			return
		}
	}
	rt.notes = append(rt.notes, "no glibc descriptor of struct pthread: kernel thread ids matched by searching the thread structures for the process's tids")
}

// scanBudget bounds the reads of a scan for _PyRuntime.
const (
	maxScan   = 32 << 20
	scanChunk = 64 << 10
)

// scan looks for _PyRuntime in img's writable sections (.data, .bss,
// and whatever holds it) when no symbol or section names it: the runtime
// is where interpreters {head, main, next_id} are a chain of interpreters
// that reaches the main one (id 0), whose first thread state points back
// to it, with a next id past 0, and a GIL that is free or held by one of
// its threads.
func (rt *Runtime) scan(img *Image) (uint64, error) {
	var scanned uint64
	buf := make([]byte, scanChunk)
	for _, s := range img.Sections {
		if !s.Writable {
			continue
		}
		for off := uint64(0); off < s.Size && scanned < maxScan; off += scanChunk {
			n := min(scanChunk, s.Size-off)
			chunk := buf[:n]
			if _, err := rt.r.mem.ReadAt(chunk, s.Addr+off); err != nil {
				break
			}
			scanned += n
			for i := uint64(0); i+8 <= n; i += 8 {
				cand := s.Addr + off + i - uint64(rt.l.RuntimeInterpretersHead)
				head := binary.LittleEndian.Uint64(chunk[i:])
				if head == 0 || head%8 != 0 || head >= userTop || cand%8 != 0 || cand < s.Addr || i+16 > n {
					continue
				}
				// interpreters {mutex, head, main, next_id}: the next id is
				// at least 1 (main's is 0) and small.
				main := binary.LittleEndian.Uint64(chunk[i+8:])
				var nextID uint64
				if i+24 <= n {
					nextID = binary.LittleEndian.Uint64(chunk[i+16:])
				}
				if main != 0 && main%8 == 0 && nextID >= 1 && nextID < 1<<20 && rt.looksLikeRuntime(cand, head, main) {
					return cand, nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no _PyRuntime symbol or .PyRuntime section in %s, and none found in its .data or .bss: %w", img.Path, ErrNotInitialized)
}

// looksLikeRuntime says whether head and main (interpreters.head and
// .main, the word after it in every version) are a list of interpreters
// that reaches the main one, id 0, whose first thread state points back
// to it, and whose GIL (the runtime's at cand before 3.12) is held by
// nobody or by one of its threads.
func (rt *Runtime) looksLikeRuntime(cand, head, main uint64) bool {
	rt.r.reset(64)
	l := rt.l
	size := fieldsEnd(l.InterpNext, l.InterpThreadsHead, l.InterpID)
	p := head
	for range 16 {
		ib, err := rt.r.structAt("PyInterpreterState", p, size, 8, nil)
		if err != nil {
			return false
		}
		if p == main {
			ts := u64(ib, l.InterpThreadsHead)
			if u64(ib, l.InterpID) != 0 || ts == 0 || ts%8 != 0 {
				return false
			}
			tb, err := rt.r.structAt("PyThreadState", ts, fieldsEnd(l.ThreadInterp, l.ThreadID), 8, nil)
			if err != nil || u64(tb, l.ThreadInterp) != main || u64(tb, l.ThreadID) == 0 {
				return false
			}
			gil := cand + uint64(l.RuntimeGIL)
			if l.InterpGIL >= 0 {
				gil = u64(ib, l.InterpGIL)
			}
			return rt.plausibleGIL(gil, main, ts)
		}
		if p = u64(ib, l.InterpNext); p == 0 {
			return false
		}
	}
	return false
}

// plausibleGIL says whether gil is unlocked (its last holder may have
// exited since), or locked by a thread state of interp (first is its
// first).
func (rt *Runtime) plausibleGIL(gil, interp, first uint64) bool {
	l := rt.l
	gb, err := rt.r.structAt("GIL", gil, fieldsEnd(l.GILLastHolder, l.GILLocked), 8, nil)
	if err != nil {
		return false
	}
	locked, holder := u32(gb, l.GILLocked), u64(gb, l.GILLastHolder)
	if locked > 1 {
		return false
	}
	if locked == 0 {
		return true
	}
	for ts, n := first, 0; ts != 0 && n < 64; n++ {
		if ts == holder {
			return true
		}
		tb, err := rt.r.structAt("PyThreadState", ts, fieldsEnd(l.ThreadNext, l.ThreadInterp), 8, nil)
		if err != nil || u64(tb, l.ThreadInterp) != interp {
			return false
		}
		ts = u64(tb, l.ThreadNext)
	}
	return false
}
