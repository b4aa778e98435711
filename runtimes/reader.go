package runtimes

import (
	"errors"

	"github.com/stallwatch/stallwatch/model"
)

// Reader is the loader half of a runtime's reader of its own state from
// outside the process, with nothing asked of the target (no flag at its
// start, no code run in it): Open reads, once per target and before any
// of its threads is stopped, where the runtime lies in a process its
// descriptor recognised (Recognises), and opens an Instance over the
// process's memory and its images' symbols. Readers are pure: they read
// through the Process the collectors give them (package target), bound
// every read, and take what they read for untrusted input.
type Reader interface {
	// Open finds the runtime in p. An error wrapping ErrAbsent says p
	// runs none of it after all (a program named python that embeds no
	// interpreter); any other error says why a runtime that is there
	// cannot be read (a version the reader does not know), for a note.
	Open(p *Process) (Instance, error)
	// NotRead begins the note that says the runtime's state was not
	// read, before the error saying why: "Python frames not read".
	NotRead() string
}

// ErrAbsent is wrapped by a Reader's Open for a process that does not run
// its runtime.
var ErrAbsent = errors.New("the runtime is not in the process")

// Instance is a runtime's reader opened over one process: what the
// collectors ask of it. Every runtime's answers its snapshot (Begin); the
// questions only some runtimes answer are optional interfaces an Instance
// may implement, as io.WriterTo is of an io.Reader: Sampled (the frames
// of each sample, read as it arrives: CPython), CodeNamer (the names of
// its compiled code: the JVM's code cache), Flagger (its boolean
// switches: HotSpot's -XX flags).
type Instance interface {
	// Begin starts the reading of one snapshot of the process, before
	// any of its threads is stopped (what costs no stop is read here:
	// CPython's thread states and GILs); an error says why the
	// runtime's state is not read, for the snapshot's notes.
	Begin() (Reading, error)
}

// Reading is one snapshot's reading of a runtime.
type Reading interface {
	// Stop reads what must be read of thread tid while it stands still
	// (stopped, or blocked in the kernel; st says which, its registers
	// and its native stack): its runtime frames, which the runtime may
	// move or change once it runs again.
	Stop(tid int, st Stop)
	// Apply puts what was read into the snapshot, once its native
	// stacks are named and every stop is over (a reader that reads more
	// then stops no thread): the runtime's frames in place of the
	// native frames that run them, the threads' names and what each
	// waits for as the runtime knows it (a Java monitor and its holder,
	// CPython's GIL), process-level facts (a safepoint held up), and
	// notes saying how each was read.
	Apply(snap *model.Snapshot, note func(format string, args ...any))
}

// Stop is a thread as the snapshot found it standing still.
type Stop struct {
	// Stopped says the thread is under a ptrace stop; false: it is read
	// without one (blocked in the kernel, or running: then what is read
	// may change while it is read, and PCs is empty).
	Stopped bool
	// PC, SP, FP are its registers at the stop (zero without one).
	PC, SP, FP uint64
	// PCs are its native stack's return addresses, innermost first,
	// with each frame's frame pointer (FPs, 0 where the unwinder did
	// not learn it) and whether the pc is exact (Exact: the innermost
	// frame's, or a signal frame's) rather than a return address.
	PCs, FPs []uint64
	Exact    []bool
}

// SampleReader is a Reader whose instances are Sampled: a sampler notes
// why one that could not be opened gives its samples no frames.
type SampleReader interface {
	Reader
	ReadsSamples() bool
}

// Sampled is an Instance that reads the runtime's frames of each sample
// as it arrives (sampler.Config.Annotate), for samples whose native stack
// runs through the runtime's interpreter.
type Sampled interface {
	// Annotator is a new annotator, one per capture session.
	Annotator() Annotator
}

// Annotator reads the runtime's frames of samples as they arrive and
// puts them into the samples' stacks when they are named.
type Annotator interface {
	// Annotate is the sampler's Annotate: tid's sample at time t
	// (CLOCK_MONOTONIC ns) with its user stack; it returns handles to
	// keep with the sample (nil: nothing of the runtime ran), valid
	// until Splice.
	Annotate(tid int32, t uint64, user []uint64) []uint64
	// Splice puts the frames behind a sample's handles in place of the
	// native frames that ran them; mismatch says the two disagree (read
	// at different moments, or one cut short).
	Splice(native []*model.Location, handles []uint64) (out []*model.Location, mismatch bool)
	// Note says, for capture.json, how many samples got the runtime's
	// frames and how long after the sample they were read; "" for none.
	Note() string
	// MismatchNote says, for capture.json, what it means that n of a
	// capture's samples had frames Splice found did not fit.
	MismatchNote(n int) string
}

// CodeNamer is an Instance that names the code its runtime compiled from
// its memory (the JVM's code cache), for a JIT source of names when the
// runtime writes none.
type CodeNamer interface {
	CodeNames() ([]Code, error)
}

// Code is one piece of compiled code and its name, as the runtime's own
// perf map would name it.
type Code struct {
	Start, Size uint64
	Name        string
}

// Flagger is an Instance that reads the runtime's boolean switches as it
// has them now (HotSpot's -XX flags).
type Flagger interface {
	BoolFlag(name string) (bool, error)
}

// Process is what a Reader is given of a target process.
type Process struct {
	PID    int
	Memory Memory
	// Images are the object files it maps, one each, the executable
	// among them (Image.Executable).
	Images []Image
	// TIDs are its threads' kernel ids when it was opened.
	TIDs []int
	// Mappings say what an address of the process is.
	Mappings Mappings
}

// Image is one object file the target maps, as a reader sees it.
type Image struct {
	Path       string // in the target's mount namespace
	Executable bool   // the process's program (/proc/<pid>/exe)
	// Object reads the file; nil when it could not be opened (Err says
	// why).
	Object Object
	Err    error
}

// Object is what a reader reads of an object file, at the addresses the
// target maps it at. Each is read at the call, from the file as parsed
// once per stallwatch process (internal/objfile).
type Object interface {
	// Lookup returns the symbols of names the file defines (its dynamic
	// symbols, and .symtab's where it has them).
	Lookup(names []string) (Symbols, error)
	// Sections are the file's sections.
	Sections() []Section
	// DataInts are the values of the integer data symbols whose names
	// start with prefix (V8's v8dbg_* table); DataBytes one data
	// symbol's bytes.
	DataInts(prefix string) (map[string]int64, error)
	DataBytes(name string) ([]byte, error)
	// Functions is the file's table of functions by address, loaded at
	// the call (call it before any stop); local says it holds .symtab's
	// local functions, not only the exported ones.
	Functions() (fns Functions, local bool, err error)
}

// Functions names the function an address is in.
type Functions interface {
	FunctionAt(addr uint64) (name string, ok bool)
}

// Section is one section of an image.
type Section struct {
	Name       string
	Addr, Size uint64
	Writable   bool
}

// Mappings say what is mapped at an address of the target.
type Mappings interface {
	// At is the image mapped at addr (its Path), or anonymous
	// executable memory (anon: where JITs put code); ok is false for an
	// address nothing is mapped at.
	At(addr uint64) (path string, anon, ok bool)
}

// Memory reads the target's memory; a read that gets fewer than len(p)
// bytes returns an error. The readers of runtimes/cpython, runtimes/hotspot
// and runtimes/v8 declare this method set, and internal/addrspace's
// Memory has it.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// Symbols looks up a symbol an image defines, by name: its run-time
// address and size; ok is false when the image does not define it.
type Symbols interface {
	Symbol(name string) (addr, size uint64, ok bool)
}

// absent is a reader's own error for a process without its runtime
// (cpython.ErrNotPython), which is also ErrAbsent.
type absent struct{ err error }

func (a absent) Error() string   { return a.err.Error() }
func (a absent) Unwrap() []error { return []error{a.err, ErrAbsent} }

// Recognises says whether a process runs r, as its descriptor knows it:
// its executable's name (Executables), a shared library it maps
// (Libraries), or a symbol its executable defines (Exports, a runtime
// linked into a program of another name). Frames cannot say it before a
// stop and are not asked.
func (r *Runtime) Recognises(p *Process) bool {
	for _, img := range p.Images {
		switch {
		case img.Executable && OfExecutable(img.Path) == r:
			return true
		case !img.Executable && OfLibrary(img.Path) == r:
			return true
		case img.Executable && len(r.Exports) > 0 && img.Object != nil && defines(img.Object, r.Exports):
			return true
		}
	}
	return false
}

func defines(o Object, names []string) bool {
	s, err := o.Lookup(names)
	if err != nil || s == nil {
		return false
	}
	for _, n := range names {
		if _, _, ok := s.Symbol(n); ok {
			return true
		}
	}
	return false
}
