package target

import (
	"path/filepath"
	"strings"
	"sync"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/objfile"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/runtimes/cpython"
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
