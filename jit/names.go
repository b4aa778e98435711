package jit

import (
	"strconv"
	"strings"

	"github.com/ianlancetaylor/demangle"
)

// Name is what people read for a piece of JIT code: the function, and the
// source file and line when the raw name holds them.
type Name struct {
	Name string
	File string
	Line int
}

// DisplayName turns a runtime's raw symbol name into the name people read.
// With RuntimeUnknown the runtime is guessed from the name. Names it does
// not recognize come back unchanged (mangled C++ and Rust names demangled).
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
	switch rt {
	case RuntimeV8:
		n, ok = v8Name(raw)
	case RuntimeLLVM:
		n, ok = juliaName(raw)
	case RuntimeJVM:
		n, ok = jvmName(raw)
	case RuntimeDotNet:
		n, ok = dotnetName(raw)
	case RuntimeCPython:
		n, ok = cpythonName(raw)
	case RuntimeWasmtime:
		n, ok = wasmtimeName(raw)
	}
	if !ok || n.Name == "" {
		n = Name{Name: raw}
		if strings.HasPrefix(raw, "_Z") || strings.HasPrefix(raw, "_R") {
			if d := demangle.Filter(raw); d != "" {
				n.Name = d
			}
		}
	}
	return n
}

// v8Tiers are the marks V8 puts before a JS function's name: ~ interpreted
// or unoptimized, ^ Sparkplug, + Maglev, * TurboFan.
const v8Tiers = "~^+*"

// v8Name reads "<Kind>:<tier><name> <script>:<line>:<col>". Kinds that are
// not the user's JavaScript (Builtin, BytecodeHandler, Stub, RegExp ...)
// keep their prefix: "ArrayMap" alone would read like a user function.
func v8Name(raw string) (Name, bool) {
	kind, rest, ok := strings.Cut(raw, ":")
	if !ok {
		return Name{}, false
	}
	switch kind {
	case "JS", "LazyCompile", "Function", "Script", "Eval":
	default:
		return Name{Name: raw}, true
	}
	if rest != "" && strings.IndexByte(v8Tiers, rest[0]) >= 0 {
		rest = rest[1:]
	}
	name, file, line := splitV8Script(rest)
	if name == "" {
		name = "(anonymous)"
	}
	return Name{Name: name, File: file, Line: line}, true
}

// splitV8Script separates "name script:line:col". The function name may
// hold spaces ("get foo") and so may the script's path; the script is
// taken to start at the first space followed by something path-like, or
// else at the last space.
func splitV8Script(s string) (name, file string, line int) {
	cut := -1
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' && pathLike(s[i+1:]) {
			cut = i
			break
		}
	}
	if cut < 0 {
		cut = strings.LastIndexByte(s, ' ')
	}
	if cut < 0 {
		// No script: a name alone, or a script alone (":1:20").
		if f, l, ok := trimLineCol(s); ok && !strings.ContainsAny(f, " ") && (f == "" || pathLike(f)) {
			return "", f, l
		}
		return s, "", 0
	}
	name = s[:cut]
	if f, l, ok := trimLineCol(s[cut+1:]); ok {
		return name, f, l
	}
	return name, s[cut+1:], 0
}

func pathLike(s string) bool {
	if s == "" {
		return false
	}
	switch s[0] {
	case '/', '.', '[', ':', '<':
		return true
	}
	return strings.HasPrefix(s, "node:") || strings.HasPrefix(s, "file:") ||
		strings.HasPrefix(s, "http:") || strings.HasPrefix(s, "https:") ||
		strings.HasPrefix(s, "ext:") || strings.HasPrefix(s, "deno:")
}

// trimLineCol removes ":line:col" or ":line" from the end of s.
func trimLineCol(s string) (file string, line int, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 || !allDigits(s[i+1:]) {
		return s, 0, false
	}
	n, _ := strconv.Atoi(s[i+1:])
	if j := strings.LastIndexByte(s[:i], ':'); j >= 0 && allDigits(s[j+1:i]) {
		// ":line:col": the column is dropped.
		n, _ = strconv.Atoi(s[j+1 : i])
		return s[:j], n, true
	}
	return s[:i], n, true
}

func allDigits(s string) bool {
	if s == "" || len(s) > 9 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// juliaName strips Julia's code generator decorations as Julia's own
// jl_demangle does (src/debuginfo.cpp): "julia_f_123", "japi1_f_123" and
// "japi3_f_123" (specialized and generic entry points compiled at run
// time), "jsys1_f_123" and "jlsys_f_123" (the same from a system or
// package image) hold the body of f; wrappers (jfptr_, jlcapi_, jlplt_,
// tojlinvoke) keep their prefix so that a stack does not show f twice.
func juliaName(raw string) (Name, bool) {
	for _, p := range []string{"julia_", "japi1_", "japi3_", "jsys1_", "jlsys_"} {
		if rest, ok := strings.CutPrefix(raw, p); ok {
			return Name{Name: trimJuliaCounter(rest)}, true
		}
	}
	for _, p := range []string{"jfptr_", "jlcapi_", "tojlinvoke", "jlplt_"} {
		if strings.HasPrefix(raw, p) {
			return Name{Name: trimJuliaCounter(raw)}, true
		}
	}
	return Name{}, false
}

// trimJuliaCounter removes the "_<digits>" counter Julia appends to make
// each specialization's symbol unique (and a ".<digits>" clone suffix).
func trimJuliaCounter(s string) string {
	if i := strings.LastIndexByte(s, '.'); i > 0 && allDigits(s[i+1:]) {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, '_'); i > 0 && allDigits(s[i+1:]) {
		s = s[:i]
	}
	return s
}

// jvmName handles both JVM spellings: HotSpot's own perf map
// ("long Hot.fibonacci(long)": the return type goes) and perf's JVMTI
// agent ("LHot;fibonacci(J)J": class signature, method, JNI descriptor).
func jvmName(raw string) (Name, bool) {
	if p, ok := jvmtiParts(raw); ok {
		return Name{Name: p}, true
	}
	if isJVMExternal(raw) {
		open := strings.IndexByte(raw, '(')
		sp := strings.LastIndexByte(raw[:open], ' ')
		return Name{Name: raw[sp+1:]}, true
	}
	return Name{}, false
}

// isJVMExternal reports whether s looks like "<type> <class>.<method>(...)".
func isJVMExternal(s string) bool {
	open := strings.IndexByte(s, '(')
	if open < 0 || !strings.HasSuffix(s, ")") {
		return false
	}
	sp := strings.LastIndexByte(s[:open], ' ')
	return sp > 0 && strings.IndexByte(s[sp+1:open], '.') > 0 && !strings.Contains(s[:sp], "[")
}

// jvmtiParts decodes "Lpkg/Class;method(args)ret" into
// "pkg.Class.method(args)" with Java type names.
func jvmtiParts(s string) (string, bool) {
	if len(s) < 4 || s[0] != 'L' {
		return "", false
	}
	semi := strings.IndexByte(s, ';')
	open := strings.IndexByte(s, '(')
	if semi < 2 || open < semi+2 {
		return "", false
	}
	closeP := strings.IndexByte(s[open:], ')')
	if closeP < 0 {
		return "", false
	}
	closeP += open
	class := strings.ReplaceAll(s[1:semi], "/", ".")
	method := s[semi+1 : open]
	args, ok := jniTypes(s[open+1 : closeP])
	if !ok || strings.ContainsAny(method, " ;/") {
		return "", false
	}
	if _, ok := jniTypes(s[closeP+1:]); !ok {
		return "", false
	}
	return class + "." + method + "(" + strings.Join(args, ", ") + ")", true
}

// jniTypes decodes a sequence of JNI field descriptors ("JLjava/lang/String;[I").
func jniTypes(s string) ([]string, bool) {
	var out []string
	for len(s) > 0 {
		dims := 0
		for len(s) > 0 && s[0] == '[' {
			dims++
			s = s[1:]
		}
		if s == "" {
			return nil, false
		}
		var t string
		switch s[0] {
		case 'Z':
			t = "boolean"
		case 'B':
			t = "byte"
		case 'C':
			t = "char"
		case 'S':
			t = "short"
		case 'I':
			t = "int"
		case 'J':
			t = "long"
		case 'F':
			t = "float"
		case 'D':
			t = "double"
		case 'V':
			t = "void"
		case 'L':
			end := strings.IndexByte(s, ';')
			if end < 2 {
				return nil, false
			}
			t = strings.ReplaceAll(s[1:end], "/", ".")
			s = s[end:]
		default:
			return nil, false
		}
		s = s[1:]
		out = append(out, t+strings.Repeat("[]", dims))
	}
	return out, true
}

// dotnetName reads "[instance] <ret> [<assembly>] <Type>::<Method>(<args>)[<tier>]".
func dotnetName(raw string) (Name, bool) {
	s := raw
	if i := strings.LastIndexByte(s, '['); i > 0 && strings.HasSuffix(s, "]") && s[i-1] == ')' {
		s = s[:i] // tier: [OptimizedTier1], [PreJIT], ...
	}
	i := strings.Index(s, "] ")
	if i < 0 || !strings.Contains(s[:i], "[") {
		return Name{}, false
	}
	return Name{Name: s[i+2:]}, true
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

// wasmtimeName keeps the function's own name from
// "wasm[0]::function[3]::fib" when the module had a name section.
func wasmtimeName(raw string) (Name, bool) {
	if _, fn, ok := strings.Cut(raw, "::function["); ok {
		if _, name, ok := strings.Cut(fn, "]::"); ok && name != "" {
			return Name{Name: name}, true
		}
	}
	return Name{Name: raw}, true
}
