package runtimes

import "strings"

// Wasmtime runs WebAssembly; --profile=jitdump (or perfmap) names the
// code it compiles.
var Wasmtime = &Runtime{
	ID:          "wasmtime",
	Name:        "Wasmtime",
	Executables: []string{"wasmtime"},
	JIT: &JIT{
		Writer: "wasmtime",
		Switch: "run wasmtime with --profile=jitdump (or --profile=perfmap)",
		Writes: func(raw string) bool {
			return strings.HasPrefix(raw, "wasm[") || strings.HasPrefix(raw, "wasm-function[") || strings.HasPrefix(raw, "wasm::")
		},
		Display: wasmtimeName,
	},
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
