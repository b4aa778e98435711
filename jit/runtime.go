package jit

import (
	"fmt"
	"strings"
)

// Runtime is the JIT that wrote a symbol.
type Runtime uint8

const (
	RuntimeUnknown  Runtime = iota
	RuntimeV8               // Node.js, Deno, Chrome: --perf-prof, --perf-basic-prof
	RuntimeLLVM             // an LLVM JIT through PerfJITEventListener; Julia
	RuntimeJVM              // HotSpot: libperf-jvmti.so, jcmd Compiler.perfmap
	RuntimeDotNet           // .NET: DOTNET_PerfMapEnabled
	RuntimeWasmtime         // --profile=jitdump / perfmap
	RuntimeCPython          // python -X perf / -X perf_jit
)

var runtimeNames = [...]string{
	RuntimeUnknown:  "unknown",
	RuntimeV8:       "v8",
	RuntimeLLVM:     "llvm",
	RuntimeJVM:      "jvm",
	RuntimeDotNet:   "dotnet",
	RuntimeWasmtime: "wasmtime",
	RuntimeCPython:  "cpython",
}

func (r Runtime) String() string {
	if int(r) < len(runtimeNames) {
		return runtimeNames[r]
	}
	return "unknown"
}

// MarshalText makes runtimes readable in JSON.
func (r Runtime) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// v8Prefixes are the code kinds V8's perf logger writes before the colon
// (log.cc, CodeEventLogger); "LazyCompile", "Function" and "Script" are
// the names of V8 before 11.x.
var v8Prefixes = []string{
	"JS:", "Builtin:", "BytecodeHandler:", "Handler:", "Stub:", "RegExp:",
	"Eval:", "Script:", "LazyCompile:", "Function:", "Callback:",
	"Wasm:",
}

// llvmPrefixes are the symbol prefixes Julia's code generator gives the
// functions it hands to LLVM (those src/debuginfo.cpp's jl_demangle
// knows, and its wrappers'), and its runtime's own (jl_).
var llvmPrefixes = []string{"julia_", "jfptr_", "japi1_", "japi3_", "jsys1_", "jlsys_", "jlcapi_", "jlplt_", "tojlinvoke", "jl_"}

// detectRuntime guesses the writer from one raw name; RuntimeUnknown when
// the name says nothing decisive. It only looks at prefixes and a few
// bytes, so it is cheap enough to call for every record.
func detectRuntime(name string) Runtime {
	if name == "" {
		return RuntimeUnknown
	}
	switch name[0] {
	case 'J', 'B', 'H', 'S', 'R', 'E', 'L', 'F', 'C', 'W':
		for _, p := range v8Prefixes {
			if strings.HasPrefix(name, p) {
				return RuntimeV8
			}
		}
	}
	if strings.HasPrefix(name, "py::") {
		return RuntimeCPython
	}
	if strings.HasPrefix(name, "wasm[") || strings.HasPrefix(name, "wasm-function[") || strings.HasPrefix(name, "wasm::") {
		return RuntimeWasmtime
	}
	for _, p := range llvmPrefixes {
		if strings.HasPrefix(name, p) {
			return RuntimeLLVM
		}
	}
	if _, ok := jvmtiParts(name); ok {
		return RuntimeJVM
	}
	if isDotNet(name) {
		return RuntimeDotNet
	}
	if isJVMExternal(name) {
		return RuntimeJVM
	}
	return RuntimeUnknown
}

// isDotNet recognizes "<ret> [<assembly>] <Type>::<Method>(<args>)".
func isDotNet(name string) bool {
	i := strings.Index(name, "] ")
	if i < 0 {
		return false
	}
	j := strings.LastIndexByte(name[:i], '[')
	rest := name[i:]
	return j >= 0 && (j == 0 || name[j-1] == ' ') && strings.Contains(rest, "::") && strings.Contains(rest, "(")
}

// runtimeFromPath recognizes the directories LLVM's listener and perf's
// JVMTI agent create under ~/.debug/jit.
func runtimeFromPath(path string) Runtime {
	switch {
	case strings.Contains(path, "/llvm-IR-jit-"):
		return RuntimeLLVM
	case strings.Contains(path, "/java-jit-"):
		return RuntimeJVM
	}
	return RuntimeUnknown
}

// UnmarshalText reads what MarshalText wrote.
func (r *Runtime) UnmarshalText(b []byte) error {
	for i, n := range runtimeNames {
		if n == string(b) {
			*r = Runtime(i)
			return nil
		}
	}
	return fmt.Errorf("unknown runtime %q", b)
}
