package runtimes

import (
	"errors"
	"fmt"
	"math/bits"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes/cpython"
)

// Python is CPython. Its perf trampolines (3.12 -X perf, 3.13 -X
// perf_jit) name Python functions in a perf map or a jitdump; its reader
// (package runtimes/cpython) reads its threads' Python frames and its
// GIL from its memory, at a snapshot and as each sample arrives.
var Python = &Runtime{
	ID:          "python",
	Name:        "CPython",
	Executables: []string{"python"},
	Libraries:   []string{"libpython"},
	// A static interpreter in a program of another name (uWSGI).
	Exports: []string{"_PyRuntime"},
	Reader:  pythonReader{},
	JIT: &JIT{
		Writer:  "cpython",
		Switch:  "run CPython 3.12 or later with -X perf (or PYTHONPERFSUPPORT=1; 3.13: -X perf_jit) so that Python functions appear in native stacks",
		Writes:  func(raw string) bool { return strings.HasPrefix(raw, "py::") },
		Display: cpythonName,
	},
}

// cpythonName reads the perf trampoline's "py::<qualname>:<file>".
func cpythonName(raw string) (Name, bool) {
	rest, ok := strings.CutPrefix(raw, "py::")
	if !ok {
		return Name{}, false
	}
	qual, file, _ := strings.Cut(rest, ":")
	return Name{Name: qual, File: file}, true
}

// pythonReader opens CPython's reader (package runtimes/cpython).
type pythonReader struct{}

func (pythonReader) NotRead() string { return "Python frames not read" }

// ReadsSamples: its instances read each sample's Python frames.
func (pythonReader) ReadsSamples() bool { return true }

// pythonSymbols are the names CPython's reader looks up (cpython.Open).
var pythonSymbols = []string{
	"_PyRuntime", "Py_Version", "PyCode_Type", "PyUnicode_Type", "PyBytes_Type",
	"PyFrame_Type", "_Py_NoneStruct", "_thread_db_pthread_tid",
	"_PyEval_EvalFrameDefault", "_PyEval_EvalFrameDefault.cold",
}

func (pythonReader) Open(p *Process) (Instance, error) {
	rt, err := cpython.Open(p.Memory, PythonImages(p), cpython.Options{TIDs: p.TIDs})
	switch {
	case errors.Is(err, cpython.ErrNotPython):
		return nil, absent{err}
	case err != nil:
		return nil, err
	}
	return &pythonInstance{rt: rt}, nil
}

// PythonImages are, for CPython's reader, the images of a process that
// may hold the interpreter or say where its threads' kernel ids lie: the
// executable (a static build), anything named python (libpython3.X.so)
// and libc, each with the symbols the reader asks for and its sections.
func PythonImages(p *Process) []cpython.Image {
	var out []cpython.Image
	for _, img := range p.Images {
		base := path.Base(img.Path)
		if img.Object == nil || !img.Executable && !strings.Contains(base, "python") && !strings.HasPrefix(base, "libc.so") && !strings.HasPrefix(base, "libc-") {
			continue
		}
		syms, _ := img.Object.Lookup(pythonSymbols)
		ci := cpython.Image{Path: img.Path, Symbols: syms}
		for _, s := range img.Object.Sections() {
			ci.Sections = append(ci.Sections, cpython.Section{Name: s.Name, Addr: s.Addr, Size: s.Size, Writable: s.Writable})
		}
		out = append(out, ci)
	}
	return out
}

// pythonInstance is a target's CPython runtime, and the locations of its
// Python frames.
type pythonInstance struct {
	rt   *cpython.Runtime
	locs pythonLocs
}

// CPython is the reader's runtime, for what only CPython answers (its
// version, a Dump of every thread).
func (pi *pythonInstance) CPython() *cpython.Runtime { return pi.rt }

// Begin lists the thread states and the GILs (reading them costs no stop).
func (pi *pythonInstance) Begin() (Reading, error) {
	ts, gils, err := pi.rt.Threads()
	if err != nil && len(ts) == 0 {
		return nil, fmt.Errorf("CPython %s: %w", pi.rt.Version(), err)
	}
	r := &pythonReading{pi: pi, states: map[int]uint64{}, gils: gils, frames: map[int][]cpython.Frame{}, errs: map[int]error{}, partial: err}
	for _, t := range ts {
		if t.TID != 0 {
			r.states[t.TID] = t.State
		}
	}
	return r, nil
}

// pythonReading is one snapshot's: each kernel thread's thread state, the
// GILs, and the Python frames read of each thread (under its stop when it
// had one).
type pythonReading struct {
	pi      *pythonInstance
	states  map[int]uint64 // tid → PyThreadState
	gils    []cpython.GIL
	frames  map[int][]cpython.Frame
	errs    map[int]error
	partial error // why the thread states were read in part
}

// Stop reads thread tid's Python frames: while the thread is stopped, or
// without a stop (then a running thread's frames may change while they
// are read: a walk cut short says why in its error).
func (r *pythonReading) Stop(tid int, _ Stop) {
	state, ok := r.states[tid]
	if !ok {
		return
	}
	// Code objects checked for one thread are not read again for the
	// next (their names are what a stop must not wait for).
	fs, err := r.pi.rt.FramesCached(state, nil)
	r.frames[tid] = fs
	if err != nil {
		r.errs[tid] = err
	}
}

// Apply puts each thread's Python frames in place of its native
// evaluation frames, and makes the futex waits on a GIL waits for the
// thread holding it.
func (r *pythonReading) Apply(snap *model.Snapshot, note func(string, ...any)) {
	v := r.pi.rt.Version()
	if r.partial != nil {
		note("CPython %s: thread states read in part: %v", v, r.partial)
	}
	for i := range snap.Threads {
		t := &snap.Threads[i]
		if err := r.errs[t.TID]; err != nil {
			t.Err = errors.Join(t.Err, fmt.Errorf("reading its Python frames: %w", err))
		}
		if fs := r.frames[t.TID]; len(fs) > 0 {
			t.User, _ = r.pi.splice(t.User, fs)
		}
	}
	r.gilWaits(snap)
	how := "while each thread was stopped"
	if !snap.PtraceUsed {
		how = "without stopping the threads: a running thread's frames may have changed while they were read"
	}
	note("CPython %s: Python frames read from the interpreter's memory %s", v, how)
	byState := r.byState()
	for _, g := range r.gils {
		if tid := byState[g.Holder]; g.Locked && tid != 0 {
			note("CPython %s: the GIL (%#x) is held by tid %d (read before the threads were stopped)", v, g.Addr, tid)
		}
	}
}

func (r *pythonReading) byState() map[uint64]int {
	out := map[uint64]int{}
	for tid, s := range r.states {
		out[s] = tid
	}
	return out
}

// futexNr is futex(2)'s system call number (x86-64).
const futexNr = 202

// gilWaits turns the futex waits on a GIL into waits for the thread
// holding it: threads waiting in take_gil sleep on the GIL's condition
// variable or mutex, which Debian's stripped python3 does not name.
func (r *pythonReading) gilWaits(snap *model.Snapshot) {
	byState := r.byState()
	for i := range snap.Threads {
		t := &snap.Threads[i]
		if t.Syscall == nil || t.Syscall.Nr != futexNr {
			continue
		}
		for _, g := range r.gils {
			if !g.Waits(t.Syscall.Args[0]) {
				continue
			}
			w := &model.Wait{Kind: "gil", Addr: t.Syscall.Args[0]}
			holder := byState[g.Holder]
			switch {
			case g.Locked && holder != 0 && holder != t.TID:
				w.Owner = holder
				w.Desc = fmt.Sprintf("CPython's GIL (%#x) held by tid %d", g.Addr, holder)
			default:
				w.Desc = fmt.Sprintf("CPython's GIL (%#x), changing hands", g.Addr)
			}
			t.Wait = w
		}
	}
}

// pythonLocs interns the locations of Python frames: one *Location per
// code object and line, as the symbolizer has one per address, so that
// renderings (pprof's locations by pointer) merge them.
type pythonLocs struct {
	mu   sync.Mutex
	locs map[pythonKey]*model.Location
}

type pythonKey struct {
	code uint64
	line int
	fn   string
	file string
}

// maxPythonLocs bounds the locations remembered; past it they start over
// (locations already returned stay valid).
const maxPythonLocs = 1 << 16

var pythonMapping = &model.Mapping{
	File: model.PythonMapping, Kind: model.KindPython,
	HasFunctions: true, HasFilenames: true, HasLineNumbers: true,
}

// location is the location of one Python frame (kind python, in the
// pseudo mapping "[python]"; its address the code object's).
func (pi *pythonInstance) location(f cpython.Frame) *model.Location {
	k := pythonKey{code: f.Code, line: f.Line, fn: f.Function, file: f.File}
	pi.locs.mu.Lock()
	defer pi.locs.mu.Unlock()
	if l := pi.locs.locs[k]; l != nil {
		return l
	}
	if pi.locs.locs == nil || len(pi.locs.locs) >= maxPythonLocs {
		pi.locs.locs = map[pythonKey]*model.Location{}
	}
	l := &model.Location{
		Addr: f.Code, Mapping: pythonMapping, Kind: model.KindPython,
		Lines: []model.Line{{Function: f.Function, SystemName: f.Function, File: f.File, Line: int64(f.Line)}},
	}
	pi.locs.locs[k] = l
	return l
}

// splice puts a thread's Python frames (innermost first, as cpython reads
// them) in place of the native frames of the interpreter's evaluation
// function in its native stack, as py-spy dump --native shows them: each
// evaluation frame stands for one call (cpython.Calls). CPython 3.12's
// perf trampoline ("py::…" from -X perf's perf map) just outside an
// evaluation frame names the same function and goes. Calls left over
// when the native stack ends first (it was cut short) follow its last
// frame, before the pseudo-frame saying why it ends. mismatch says the
// numbers of evaluation frames and calls differ: the two were read at
// different moments, or one of them is cut short.
func (pi *pythonInstance) splice(native []*model.Location, py []cpython.Frame) (out []*model.Location, mismatch bool) {
	calls := cpython.Calls(py)
	out = make([]*model.Location, 0, len(native)+len(py))
	next := 0
	for i := 0; i < len(native); i++ {
		l := native[i]
		if !isEvalLocation(l) {
			if l.IsCut() && next < len(calls) {
				out = pi.appendCalls(out, calls[next:])
				next = len(calls)
			}
			out = append(out, l)
			continue
		}
		if next >= len(calls) {
			mismatch = true
			out = append(out, l)
			continue
		}
		out = pi.appendCalls(out, calls[next:next+1])
		next++
		if i+1 < len(native) && isTrampoline(native[i+1]) {
			i++
		}
	}
	if next < len(calls) {
		mismatch = true
		out = pi.appendCalls(out, calls[next:])
	}
	return out, mismatch
}

func (pi *pythonInstance) appendCalls(out []*model.Location, calls [][]cpython.Frame) []*model.Location {
	for _, c := range calls {
		for _, f := range c {
			out = append(out, pi.location(f))
		}
	}
	return out
}

// isEvalLocation says whether a native location is in the evaluation
// function (the function holding its code, after its inlined calls).
func isEvalLocation(l *model.Location) bool {
	if l == nil || len(l.Lines) == 0 || l.Kind != model.KindNative {
		return false
	}
	return cpython.IsEvalFunction(l.Lines[len(l.Lines)-1].Function)
}

// isTrampoline says whether l is one of CPython 3.12's perf trampolines,
// which -X perf names "py::function:file" in its perf map.
func isTrampoline(l *model.Location) bool {
	if l == nil || l.Kind != model.KindJIT || len(l.Lines) == 0 {
		return false
	}
	_, ok := cpythonName(l.Lines[0].SystemName)
	return ok
}

// Annotator gives the samples of a CPython target the Python frames
// that were running (pyAnnotator).
func (pi *pythonInstance) Annotator() Annotator {
	return &pyAnnotator{pi: pi, rt: pi.rt, states: map[int32]uint64{}, index: map[cpython.Frame]uint32{}, gen: 1}
}

// pyAnnotator gives the samples of a CPython target the Python frames
// that were running: as each sample whose user stack runs through the
// interpreter's evaluation function is decoded (sampler.Config.Annotate,
// with a wakeup per record), the sampled thread's frames are read from
// the interpreter's memory (cpython.Runtime.FramesCached: its thread
// state and frames, a few reads). They are what ran when they were read,
// which is after the sample: the delay is measured for every sample and
// said in capture.json, as the bound on their error.
//
// Frames are kept once each and the samples hold handles to them, so the
// flight recorder's samples cost 8 bytes a frame.
type pyAnnotator struct {
	pi *pythonInstance
	rt *cpython.Runtime

	mu        sync.Mutex
	states    map[int32]uint64 // tid → PyThreadState
	refreshed time.Time
	gen       uint64 // handles of an older generation are not resolved
	frames    []cpython.Frame
	index     map[cpython.Frame]uint32
	buf       []cpython.Frame
	hbuf      []uint64

	annotated, unknownThread, failed uint64
	delays                           [40]uint64 // by ⌈log2(µs)⌉ of sample → read
}

// Bounds: frames kept (past it, a new generation), and how often the
// thread states are listed again for a thread not seen in them.
const (
	maxPyFrames   = 1 << 20
	statesRefresh = 200 * time.Millisecond
)

// Annotate reads tid's Python frames when its user stack runs Python.
func (a *pyAnnotator) Annotate(tid int32, t uint64, user []uint64) []uint64 {
	if !a.runsPython(user) {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	state, ok := a.states[tid]
	if !ok && time.Since(a.refreshed) >= statesRefresh {
		a.refresh()
		state, ok = a.states[tid]
	}
	if !ok {
		a.unknownThread++
		return nil
	}
	var err error
	a.buf, err = a.rt.FramesCached(state, a.buf[:0])
	if now := monotime.Now(); now > t {
		a.delays[min(bits.Len64((now-t)/1000), len(a.delays)-1)]++
	}
	if len(a.buf) == 0 {
		if err != nil {
			a.failed++
		}
		return nil
	}
	a.annotated++
	a.hbuf = a.hbuf[:0]
	for _, f := range a.buf {
		a.hbuf = append(a.hbuf, a.handle(f))
	}
	return a.hbuf
}

// runsPython says whether a user stack has a frame of the evaluation
// function (return addresses point after their call).
func (a *pyAnnotator) runsPython(user []uint64) bool {
	for i, pc := range user {
		if a.rt.InEval(pc) || i > 0 && a.rt.InEval(pc-1) {
			return true
		}
	}
	return false
}

func (a *pyAnnotator) refresh() {
	a.refreshed = time.Now()
	ts, _, _ := a.rt.Threads()
	clear(a.states)
	for _, t := range ts {
		if t.TID != 0 {
			a.states[int32(t.TID)] = t.State
		}
	}
}

// handle interns f.
func (a *pyAnnotator) handle(f cpython.Frame) uint64 {
	i, ok := a.index[f]
	if !ok {
		if len(a.frames) >= maxPyFrames {
			a.gen++
			a.frames = a.frames[:0]
			clear(a.index)
		}
		i = uint32(len(a.frames))
		a.frames = append(a.frames, f)
		a.index[f] = i
	}
	return a.gen<<32 | uint64(i)
}

// resolve turns a sample's handles back into frames; nil when they are
// of an older generation.
func (a *pyAnnotator) resolve(hs []uint64) []cpython.Frame {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]cpython.Frame, 0, len(hs))
	for _, h := range hs {
		i := int(uint32(h))
		if h>>32 != a.gen || i >= len(a.frames) {
			return nil
		}
		out = append(out, a.frames[i])
	}
	return out
}

// Splice puts a sample's Python frames in place of its evaluation frames.
func (a *pyAnnotator) Splice(native []*model.Location, hs []uint64) ([]*model.Location, bool) {
	py := a.resolve(hs)
	if len(py) == 0 {
		return native, false
	}
	return a.pi.splice(native, py)
}

// MismatchNote says what n samples whose Python frames did not fit their
// native stacks mean.
func (a *pyAnnotator) MismatchNote(n int) string {
	return fmt.Sprintf("CPython: %d samples had more or fewer evaluation calls in their Python frames than evaluation frames on their native stack (the thread called or returned between the sample and the read): their Python frames fill the evaluation frames innermost first, the rest follow the native stack", n)
}

// Note says, for capture.json, how many samples got Python frames and
// how long after the sample they were read.
func (a *pyAnnotator) Note() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n uint64
	for _, c := range a.delays {
		n += c
	}
	if n == 0 {
		return ""
	}
	q := func(f float64) string {
		want, seen := uint64(f*float64(n)), uint64(0)
		for b, c := range a.delays {
			if seen += c; seen > want || seen == n {
				return "≤" + time.Duration(uint64(1)<<b*1000).String()
			}
		}
		return "?"
	}
	s := fmt.Sprintf("CPython %s: %d samples in the interpreter got their Python frames, read from its memory as each sample arrived: %s after the sample for half, %s for 99%% (what ran then: the bound on their error)",
		a.rt.Version(), a.annotated, q(0.5), q(0.99))
	if a.failed > 0 || a.unknownThread > 0 {
		s += fmt.Sprintf("; %d could not be read, %d were of threads with no thread state", a.failed, a.unknownThread)
	}
	return s
}
