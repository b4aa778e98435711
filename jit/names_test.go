package jit

import "testing"

// Raw names as real writers produce them (Node.js 20 --perf-prof and
// --perf-basic-prof, OpenJDK 17 jcmd Compiler.perfmap, perf's JVMTI agent,
// Julia through LLVM, .NET, CPython 3.12, Wasmtime).
func nm(name, file string, line int) Name { return Name{Name: name, File: file, Line: line} }

func TestDisplayName(t *testing.T) {
	for _, c := range []struct {
		rt   Runtime
		raw  string
		want Name
	}{
		{RuntimeUnknown, "JS:*fibonacci /app/fib.js:1:1", nm("fibonacci", "/app/fib.js", 1)},
		{RuntimeV8, "JS:~fibonacci /tmp/jx/fib.js:1:19", nm("fibonacci", "/tmp/jx/fib.js", 1)},
		{RuntimeV8, "JS:^compileForInternalLoader node:internal/bootstrap/realm:383:27", nm("compileForInternalLoader", "node:internal/bootstrap/realm", 383)},
		{RuntimeV8, "JS:+hot /srv/app.js:40:5", nm("hot", "/srv/app.js", 40)},
		{RuntimeV8, "JS:~ node:internal/modules/helpers:247:41", nm("(anonymous)", "node:internal/modules/helpers", 247)},
		{RuntimeV8, "JS:~ :1:20", nm("(anonymous)", "", 1)},
		{RuntimeV8, "JS:~#updateContext node:internal/url:874:17", nm("#updateContext", "node:internal/url", 874)},
		{RuntimeV8, "JS:~Module._compile node:internal/modules/cjs/loader:1483:37", nm("Module._compile", "node:internal/modules/cjs/loader", 1483)},
		{RuntimeV8, "JS:~get size /app/set.js:12:3", nm("get size", "/app/set.js", 12)},
		{RuntimeV8, "JS:*run /my app/main.js:7:1", nm("run", "/my app/main.js", 7)},
		{RuntimeV8, "Eval:~ [eval]:1:1", nm("(anonymous)", "[eval]", 1)},
		{RuntimeUnknown, "LazyCompile:~foo /app/x.js:3", nm("foo", "/app/x.js", 3)},
		{RuntimeUnknown, "LazyCompile:*bar file:///app/x.mjs:9", nm("bar", "file:///app/x.mjs", 9)},
		{RuntimeUnknown, "Builtin:ArrayMap", nm("Builtin:ArrayMap", "", 0)},
		{RuntimeUnknown, "BytecodeHandler:Ldar", nm("BytecodeHandler:Ldar", "", 0)},
		{RuntimeUnknown, "julia_fibonacci_1234", nm("fibonacci", "", 0)},
		{RuntimeLLVM, "julia_fib_inner_77", nm("fib_inner", "", 0)},
		{RuntimeLLVM, "julia_#3_456", nm("#3", "", 0)},
		{RuntimeLLVM, "japi1_getindex_99.1", nm("getindex", "", 0)},
		{RuntimeLLVM, "jfptr_fibonacci_1235", nm("jfptr_fibonacci", "", 0)},
		{RuntimeUnknown, "jlsys_println_4412", nm("println", "", 0)},
		{RuntimeLLVM, "jsys1_show_77", nm("show", "", 0)},
		{RuntimeUnknown, "long Hot.fibonacci(long)", nm("Hot.fibonacci(long)", "", 0)},
		{RuntimeJVM, "java.lang.Object jdk.internal.misc.Unsafe.getReferenceVolatile(java.lang.Object, long)", nm("jdk.internal.misc.Unsafe.getReferenceVolatile(java.lang.Object, long)", "", 0)},
		{RuntimeJVM, "I2C/C2I adapters", nm("I2C/C2I adapters", "", 0)},
		{RuntimeUnknown, "LHot;fibonacci(J)J", nm("Hot.fibonacci(long)", "", 0)},
		{RuntimeJVM, "Ljava/util/HashMap;putVal(ILjava/lang/Object;[[BZ)Ljava/lang/Object;", nm("java.util.HashMap.putVal(int, java.lang.Object, byte[][], boolean)", "", 0)},
		{RuntimeUnknown, "instance bool [System.Private.CoreLib] dynamicClass::IL_STUB_UnboxingStub()", nm("dynamicClass::IL_STUB_UnboxingStub()", "", 0)},
		{RuntimeDotNet, "void [App] App.Program::Main(string[])[OptimizedTier1]", nm("App.Program::Main(string[])", "", 0)},
		{RuntimeUnknown, "py::fibonacci:/app/fib.py", nm("fibonacci", "/app/fib.py", 0)},
		{RuntimeCPython, "py::Worker.run.<locals>.step:/app/w.py", nm("Worker.run.<locals>.step", "/app/w.py", 0)},
		{RuntimeUnknown, "wasm[0]::function[3]::fib", nm("fib", "", 0)},
		{RuntimeWasmtime, "wasm[0]::function[3]", nm("wasm[0]::function[3]", "", 0)},
		{RuntimeUnknown, "_ZN3foo3barEv", nm("foo::bar", "", 0)}, // as ELF symbols are: gdb's style, no parameters
		{RuntimeUnknown, "some stub", nm("some stub", "", 0)},
		{RuntimeUnknown, "", nm("", "", 0)},
	} {
		if got := DisplayName(c.rt, c.raw); got != c.want {
			t.Errorf("DisplayName(%v, %q) = %+v, want %+v", c.rt, c.raw, got, c.want)
		}
	}
}

func TestDetectRuntime(t *testing.T) {
	for raw, want := range map[string]Runtime{
		"JS:*f /a.js:1:1":                 RuntimeV8,
		"Builtin:ArrayMap":                RuntimeV8,
		"julia_f_1":                       RuntimeLLVM,
		"long Hot.fibonacci(long)":        RuntimeJVM,
		"LHot;fibonacci(J)J":              RuntimeJVM,
		"void [App] App.P::Main()[Tier0]": RuntimeDotNet,
		"void [App] App.P::Main()":        RuntimeDotNet,
		"a] b::c(":                        RuntimeUnknown,
		"py::f:/a.py":                     RuntimeCPython,
		"wasm[0]::function[1]::f":         RuntimeWasmtime,
		"I2C/C2I adapters":                RuntimeUnknown,
		"Lonely":                          RuntimeUnknown,
	} {
		if got := detectRuntime(raw); got != want {
			t.Errorf("detectRuntime(%q) = %v, want %v", raw, got, want)
		}
	}
	if RuntimeV8.String() != "v8" || Runtime(200).String() != "unknown" {
		t.Error("Runtime.String")
	}
}
