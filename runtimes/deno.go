package runtimes

// Deno runs JavaScript and TypeScript on V8, whose perf map it writes when
// V8 is told to.
var Deno = &Runtime{
	ID:          "deno",
	Name:        "Deno",
	Executables: []string{"deno"},
	JIT: &JIT{
		Writer:  "v8",
		Switch:  "run deno with --v8-flags=--perf-basic-prof (a /tmp/perf-<pid>.map)",
		Writes:  isV8Name,
		Display: v8Name,
	},
}
