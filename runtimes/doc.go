// Package runtimes is what stallwatch knows of each language runtime, in
// one place: one descriptor (Runtime) per runtime, one file each — the JVM
// (HotSpot), Node.js (V8), CPython, .NET (CoreCLR), Julia, Go, Ruby, the
// BEAM, PHP, Deno, Bun and Wasmtime. Everything else reads the table:
// the findings (package analysis) recognise a capture's runtime and its
// pauses with it, the JIT symbol files (package jit) are read in each
// runtime's name syntax, the uploads (package upload) and alerts tag
// with it. A runtime is known by the same name everywhere.
//
// A descriptor says:
//
//   - how the runtime is recognised: its programs' names (a version after
//     the name is theirs: python3.11), its shared libraries (a runtime
//     embedded in another program: libjvm.so), or the functions only its
//     threads run (a runtime linked into the program: Go);
//   - its ID, which is capture.json's runtime, a runtime finding's, and
//     Datadog's `runtime` tag, and the name a sentence gives it;
//   - its JIT: the writer of the jitdump or perf map (package jit's
//     Runtime), the switch that makes the runtime write them (what the
//     missing-JIT-names finding tells), and the syntax of the names it
//     writes (JIT.Writes recognises one; JIT.Display turns it into the
//     function, file and line people read);
//   - its pauses: the functions of the thread that stops the others, of
//     the work done meanwhile, and of the threads stopped (HotSpot's
//     SafepointSynchronize, Go's stopTheWorldWithSema, CoreCLR's
//     ThreadSuspend, Julia's jl_gc_wait_for_the_world), what holds one
//     up, and the advice;
//   - its Reader, the place where a reader of the runtime's own state
//     from outside the process plugs in (below).
//
// Julia and .NET cannot run on the test machine: their descriptors are
// built from JuliaLang/julia's and dotnet/runtime's own sources and
// tested on stand-ins whose functions carry those names
// (testdata/stalls).
//
// # Names
//
// Demangle is the one demangler of C++ and Rust names, whatever a name
// comes from: an ELF file's symbols (package symbolize) or a JIT's symbol
// file (package jit, for LLVM's C++ functions). Names are those gdb
// prints: full scope and template arguments, no parameters or return
// type, a clone's kind kept ("foo [clone .cold]"), "@plt" kept, a symbol
// version dropped; Go's ABI suffixes dropped. ProcessName is how tags and
// hooks name a process: its executable's base name.
//
// # Readers
//
// A runtime whose frames and locks can be read from the process's memory,
// with no flag at its start and no code run in it, has a reader in a
// subpackage of its own: runtimes/v8 (Node.js's JavaScript frames, from
// the layout its binary publishes), and, being written, runtimes/cpython
// (CPython's thread states, frames and GIL) and runtimes/hotspot
// (HotSpot's Java threads, compiled methods and safepoint). A reader is
// pure: it reads through small interfaces of its own, Memory (a bounded
// ReadAt, which internal/addrspace's Memory is) and Symbols (an image's
// symbols by name), whose method sets this package declares too (Memory,
// Symbols), and takes what it reads for untrusted input (bounded reads,
// cycles detected, fuzzed). A reader imports nothing of this package, so
// that this package may import it: a runtime's descriptor names its
// reader in Reader through a small adapter in the descriptor's file
// (Reader.Threads: each thread's frames of the runtime's code, by native
// thread id, as the capture model has them), and a collector then finds a
// target's reader through its runtime's descriptor without naming the
// runtime. No descriptor has one yet: the snapshot calls runtimes/v8
// itself, and a descriptor whose Reader is nil leaves the runtime's
// frames to its JIT's symbol files and to the collectors that read them.
package runtimes
