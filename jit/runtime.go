package jit

import (
	"fmt"
	"strings"

	"github.com/stallwatch/stallwatch/runtimes"
)

// Runtime is the JIT that wrote a symbol: the writers package runtimes
// describes (each a runtime's JIT.Writer).
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

// detectRuntime guesses the writer from one raw name; RuntimeUnknown when
// the name says nothing decisive (package runtimes knows each JIT's
// syntax). It only looks at prefixes and a few bytes, so it is cheap
// enough to call for every record.
func detectRuntime(name string) Runtime {
	if j := runtimes.JITOf(name); j != nil {
		return runtimeOfWriter(j.Writer)
	}
	return RuntimeUnknown
}

// runtimeOfWriter is the Runtime a JIT writer's name names.
func runtimeOfWriter(w string) Runtime {
	for i, n := range runtimeNames {
		if n == w {
			return Runtime(i)
		}
	}
	return RuntimeUnknown
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
	rt := runtimeOfWriter(string(b))
	if rt == RuntimeUnknown && string(b) != runtimeNames[RuntimeUnknown] {
		return fmt.Errorf("unknown runtime %q", b)
	}
	*r = rt
	return nil
}
