package runtimes

import "strings"

// Python is CPython. Its perf trampolines (3.12 -X perf, 3.13 -X
// perf_jit) name Python functions in a perf map or a jitdump.
var Python = &Runtime{
	ID:          "python",
	Name:        "CPython",
	Executables: []string{"python"},
	Libraries:   []string{"libpython"},
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
