package runtimes

import "strings"

// Julia compiles through LLVM, whose JIT writes a jitdump under
// ENABLE_JITPROFILING=1. Julia is not on the test machine: what follows
// is from JuliaLang/julia's own sources (src/gc.c, src/safepoint.c,
// src/codegen.cpp), tested on a stand-in whose functions carry those
// names (testdata/stalls/julia_standin.c).
var Julia = &Runtime{
	ID:          "julia",
	Name:        "Julia",
	Executables: []string{"julia"},
	Libraries:   []string{"libjulia"},
	JIT: &JIT{
		Writer: "llvm",
		Switch: "start julia with ENABLE_JITPROFILING=1 (LLVM writes a jitdump under ~/.debug/jit or $JITDUMPDIR)",
		Writes: func(raw string) bool {
			for _, p := range llvmPrefixes {
				if strings.HasPrefix(raw, p) {
					return true
				}
			}
			return false
		},
		Display: juliaName,
	},
	Pause: &Pause{
		// JuliaLang/julia's src/safepoint.c, and src/gc-stock.c, formerly
		// src/gc.c: the thread that collects, in jl_gc_collect →
		// _jl_gc_collect, wins jl_safepoint_start_gc and waits for every
		// other thread to set its ptls->gc_state in
		// jl_gc_wait_for_the_world (in older releases a static function
		// of gc.c spinning in jl_cpu_pause, which the compiler may inline
		// into _jl_gc_collect; in current sources a function of
		// safepoint.c sleeping on safepoint_cond_begin), then marks
		// (gc_mark_loop, or its _serial and _parallel variants where
		// marking is parallel). The others, at a safepoint, wait for it
		// to end in jl_safepoint_wait_gc, on safepoint_cond_end: from
		// jl_set_gc_and_wait (the safepoint page's fault handler) or from
		// jl_safepoint_start_gc when another thread won the collection.
		// A thread in jl_safepoint_wait_thread_resume waits for a
		// suspension (jl_safepoint_suspend_thread) to end, not for a GC:
		// it is not one of these.
		What:       "GC safepoint",
		Collector:  []string{"jl_gc_wait_for_the_world", "jl_safepoint_start_gc"},
		Operation:  []string{"_jl_gc_collect", "jl_gc_collect", "gc_mark_loop"},
		Waiter:     []string{"jl_safepoint_wait_gc", "jl_set_gc_and_wait"},
		NotReached: "runs without reaching a safepoint (Julia polls for one when it allocates and at GC.safepoint(), not on each iteration of a loop: a loop that does not allocate holds every other thread; so does a long ccall not marked GC-safe)",
		Advice:     "GC.enable_logging(true) prints each collection; put GC.safepoint() in long loops that do not allocate, and mark long ccalls `@threadcall` or gc-safe",
	},
}

// llvmPrefixes are the symbol prefixes Julia's code generator gives the
// functions it hands to LLVM (those src/debuginfo.cpp's jl_demangle
// knows, and its wrappers'), and its runtime's own (jl_).
var llvmPrefixes = []string{"julia_", "jfptr_", "japi1_", "japi3_", "jsys1_", "jlsys_", "jlcapi_", "jlplt_", "tojlinvoke", "jl_"}

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
