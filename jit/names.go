package jit

import (
	"strings"

	"github.com/stallwatch/stallwatch/runtimes"
)

// Name is what people read for a piece of JIT code: the function, and the
// source file and line when the raw name holds them.
type Name = runtimes.Name

// DisplayName turns a runtime's raw symbol name into the name people read,
// in the syntax package runtimes says each runtime's JIT writes. With
// RuntimeUnknown the runtime is guessed from the name. Names it does not
// recognize come back unchanged, but mangled C++ and Rust names, which are
// demangled as the ELF symbols of a file are (runtimes.Demangle).
//
//	V8      "JS:*fibonacci /app/fib.js:1:1"   → fibonacci, /app/fib.js:1
//	        "LazyCompile:~foo /app/x.js:3"    → foo, /app/x.js:3
//	        "JS:~ node:internal/timers:120:65" → (anonymous), node:internal/timers:120
//	        "Builtin:ArrayMap"                → Builtin:ArrayMap (not the user's code)
//	Julia   "julia_fibonacci_1234"            → fibonacci
//	JVM     "long Hot.fibonacci(long)"        → Hot.fibonacci(long)
//	        "LHot;fibonacci(J)J" (jvmti)      → Hot.fibonacci(long)
//	.NET    "void [App] App.P::Main()[OptimizedTier1]" → App.P::Main()
//	CPython "py::fibonacci:/app/fib.py"       → fibonacci, /app/fib.py
//
// Substrings share the raw name's memory: no allocation for V8, Julia and
// CPython names.
func DisplayName(rt Runtime, raw string) Name {
	if rt == RuntimeUnknown {
		rt = detectRuntime(raw)
	}
	var n Name
	var ok bool
	if j := runtimes.JITByWriter(rt.String()); j != nil {
		n, ok = j.Display(raw)
	}
	if !ok || n.Name == "" {
		n = Name{Name: raw}
		if strings.HasPrefix(raw, "_Z") || strings.HasPrefix(raw, "_R") {
			n.Name = runtimes.Demangle(raw)
		}
	}
	return n
}
