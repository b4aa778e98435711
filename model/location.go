package model

import (
	"fmt"
	"strings"
)

// FrameKind says where a frame's code lives.
type FrameKind uint8

const (
	KindUnknown FrameKind = iota // in no mapping we know
	KindKernel                   // kernel image or module
	KindNative                   // a file-backed mapping (ELF)
	KindJIT                      // code a JIT described in a jitdump or perf map
	KindPython                   // a Python function, read from CPython's frames (package runtimes/cpython)
)

func (k FrameKind) String() string {
	switch k {
	case KindKernel:
		return "kernel"
	case KindNative:
		return "native"
	case KindJIT:
		return "jit"
	case KindPython:
		return "python"
	}
	return "unknown"
}

// PythonMapping is the pseudo mapping of Python frames (KindPython):
// their code is a code object, in no file's mapping.
const PythonMapping = "[python]"

// JavaMapping is the pseudo mapping of Java frames read from a JVM
// (package runtimes/hotspot): a method's code is bytecode or the code
// cache's, in no file's mapping. Their kind is KindJIT.
const JavaMapping = "[java]"

// Mapping describes where a location's code came from, shaped like a pprof
// mapping.
type Mapping struct {
	Start, Limit, Offset uint64
	// File is the path in the target's mount namespace, or a pseudo name:
	// "[kernel.kallsyms]", "[vdso]", "[jit]", "[anon]".
	File    string
	BuildID string // hex GNU build id, "" when unknown
	Kind    FrameKind

	HasFunctions, HasFilenames, HasLineNumbers, HasInlineFrames bool
}

// Line is one function at a location. A location has several when
// functions were inlined: the innermost first, the function that holds the
// code last (pprof's order).
type Line struct {
	// Function is the name a person reads: demangled, a runtime's prefix
	// and suffix removed (package jit's DisplayName).
	Function string
	// SystemName is the name as the symbol source wrote it (mangled, or a
	// JIT's raw name).
	SystemName string
	File       string
	Line       int64
}

// Location is what one address resolves to. Locations are shared and
// immutable once returned.
type Location struct {
	Addr    uint64
	Mapping *Mapping // nil only when the address is in no known mapping
	// Lines is never empty: an address nobody can name gets a single line
	// whose Function is "module+0xoffset" (or "[unknown] 0xaddr").
	Lines []Line
	Kind  FrameKind
}

// CutPrefix begins the name of the pseudo-frame that ends a stack cut
// short: "[truncated: no unwind info in libfoo.so]" (symbolize's
// CutLocation makes it).
const CutPrefix = "[truncated: "

// IsCut reports whether l is the pseudo-frame that ends a stack cut
// short: no mapping, address 0, one line whose function starts with
// CutPrefix.
func (l *Location) IsCut() bool {
	return l != nil && l.Mapping == nil && l.Addr == 0 && len(l.Lines) == 1 && strings.HasPrefix(l.Lines[0].Function, CutPrefix)
}

// Name returns the innermost function's name.
func (l *Location) Name() string {
	if l == nil || len(l.Lines) == 0 {
		return "?"
	}
	return l.Lines[0].Function
}

// String returns "function (file:line)" for the innermost line.
func (l *Location) String() string {
	if l == nil || len(l.Lines) == 0 {
		return "?"
	}
	ln := l.Lines[0]
	if ln.File != "" && ln.Line > 0 {
		return fmt.Sprintf("%s (%s:%d)", ln.Function, ln.File, ln.Line)
	}
	return ln.Function
}
