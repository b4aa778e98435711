package target

import (
	"path/filepath"
	"strings"
	"sync"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes/cpython"
	"github.com/stallwatch/stallwatch/symbolize"
)

// pythonSymbols are the names CPython's reader looks up (package
// runtimes/cpython, Open).
var pythonSymbols = []string{
	"_PyRuntime", "Py_Version", "PyCode_Type", "PyUnicode_Type", "PyBytes_Type",
	"PyFrame_Type", "_Py_NoneStruct", "_thread_db_pthread_tid",
	"_PyEval_EvalFrameDefault", "_PyEval_EvalFrameDefault.cold",
}

// python is the target's CPython runtime, opened once.
type python struct {
	once sync.Once
	rt   *cpython.Runtime
	err  error
}

// Python returns the target's CPython runtime, found at the first call:
// cpython.ErrNotPython for a process that runs none, a
// *cpython.VersionError for a version the reader does not know.
func (p *Process) Python() (*cpython.Runtime, error) {
	p.py.once.Do(func() {
		tids, _ := procfs.Threads(p.pid)
		p.py.rt, p.py.err = cpython.Open(p.space.Memory(), PythonImages(p.space), cpython.Options{TIDs: tids})
	})
	return p.py.rt, p.py.err
}

// PythonImages describes, for CPython's reader, the target's files that
// may hold the interpreter or say where its threads' kernel ids lie: the
// executable (a static build), anything named python (libpython3.X.so)
// and libc, each with the symbols the reader asks for and its sections,
// at their run-time addresses.
func PythonImages(space *addrspace.Space) []cpython.Image {
	exe, _ := procfs.Exe(space.Via())
	var out []cpython.Image
	seen := map[*objfile.File]bool{}
	for _, m := range space.Modules() {
		if m.File == nil || seen[m.File] || m.Gone {
			continue
		}
		seen[m.File] = true
		base := filepath.Base(m.Path)
		if m.Path != exe && !strings.Contains(base, "python") && !strings.HasPrefix(base, "libc.so") && !strings.HasPrefix(base, "libc-") {
			continue
		}
		names, _ := m.File.LookupNames(pythonSymbols)
		syms := imageSymbols{}
		for n, s := range names {
			syms[n] = objfile.Named{Addr: s.Addr + m.Bias, Size: s.Size}
		}
		img := cpython.Image{Path: m.Path, Symbols: syms}
		for _, s := range m.File.Sections() {
			img.Sections = append(img.Sections, cpython.Section{Name: s.Name, Addr: s.Addr + m.Bias, Size: s.Size, Writable: s.Writable})
		}
		out = append(out, img)
	}
	return out
}

// imageSymbols are one image's symbols by name, at run-time addresses.
type imageSymbols map[string]objfile.Named

func (s imageSymbols) Symbol(name string) (uint64, uint64, bool) {
	n, ok := s[name]
	return n.Addr, n.Size, ok
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

// PythonLocation is the location of one Python frame (kind python, in
// the pseudo mapping "[python]"; its address the code object's).
func (p *Process) PythonLocation(f cpython.Frame) *model.Location {
	k := pythonKey{code: f.Code, line: f.Line, fn: f.Function, file: f.File}
	p.pyLocs.mu.Lock()
	defer p.pyLocs.mu.Unlock()
	if l := p.pyLocs.locs[k]; l != nil {
		return l
	}
	if p.pyLocs.locs == nil || len(p.pyLocs.locs) >= maxPythonLocs {
		p.pyLocs.locs = map[pythonKey]*model.Location{}
	}
	l := &model.Location{
		Addr: f.Code, Mapping: pythonMapping, Kind: model.KindPython,
		Lines: []model.Line{{Function: f.Function, SystemName: f.Function, File: f.File, Line: int64(f.Line)}},
	}
	p.pyLocs.locs[k] = l
	return l
}

// SplicePython puts a thread's Python frames (innermost first, as
// cpython reads them) in place of the native frames of the interpreter's
// evaluation function in its native stack, as py-spy dump --native shows
// them: each evaluation frame stands for one call (cpython.Calls).
// CPython 3.12's perf trampoline ("py::…" from -X perf's perf map) just
// outside an evaluation frame names the same function and goes. Calls
// left over when the native stack ends first (it was cut short) follow
// its last frame, before the pseudo-frame saying why it ends. mismatch
// says the numbers of evaluation frames and calls differ: the two were
// read at different moments, or one of them is cut short.
func (p *Process) SplicePython(native []*model.Location, py []cpython.Frame) (out []*model.Location, mismatch bool) {
	calls := cpython.Calls(py)
	out = make([]*model.Location, 0, len(native)+len(py))
	next := 0
	for i := 0; i < len(native); i++ {
		l := native[i]
		if !isEvalLocation(l) {
			if symbolize.IsCut(l) && next < len(calls) {
				out = p.appendCalls(out, calls[next:])
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
		out = p.appendCalls(out, calls[next:next+1])
		next++
		if i+1 < len(native) && isTrampoline(native[i+1]) {
			i++
		}
	}
	if next < len(calls) {
		mismatch = true
		out = p.appendCalls(out, calls[next:])
	}
	return out, mismatch
}

func (p *Process) appendCalls(out []*model.Location, calls [][]cpython.Frame) []*model.Location {
	for _, c := range calls {
		for _, f := range c {
			out = append(out, p.PythonLocation(f))
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
	return l != nil && l.Kind == model.KindJIT && len(l.Lines) > 0 && strings.HasPrefix(l.Lines[0].SystemName, "py::")
}
