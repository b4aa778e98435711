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
//     embedded in another program: libjvm.so), the symbols only its code
//     exports (an interpreter linked into a program of another name:
//     _PyRuntime), or the functions only its threads run (a runtime
//     linked into the program: Go);
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
//   - its Reader, of the runtime's own state from outside the process
//     (below).
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
// subpackage of its own: runtimes/cpython (CPython's thread states,
// frames and GIL), runtimes/hotspot (HotSpot's Java threads, their frames
// and locks, its safepoint and its code cache) and runtimes/v8 (Node.js's
// JavaScript frames, from the layout its binary publishes). A reader is
// pure: it reads through small interfaces of its own, a bounded ReadAt
// (which internal/addrspace's Memory is) and an image's symbols by name,
// whose method sets this package declares too (Memory, Symbols), and
// takes what it reads for untrusted input (bounded reads, cycles
// detected, fuzzed). A reader imports nothing of this package, so that
// this package may import it: each descriptor names its reader in Reader
// through an adapter in the descriptor's file (python.go, jvm.go,
// node.go), and a collector finds a target's readers through the
// descriptors without naming a runtime (package target: Readers).
//
// The adapters split as opentelemetry-ebpf-profiler's interpreter
// loaders and instances do. A Reader is the loader: given a Process (its
// memory, its images with their symbols, sections and data, its threads,
// what is mapped where) that the descriptor recognises (Recognises: its
// executable's name, a library it maps, a symbol its executable
// exports), Open finds the runtime once, before any thread is stopped,
// and opens an Instance over it, or says it is absent after all
// (ErrAbsent) or why it cannot be read (a version the reader does not
// know). An Instance answers what every collector asks: a snapshot's
// Reading, which reads what must be read of each thread while it stands
// still (Stop: its registers and native stack) and then puts the
// runtime's frames in place of the native frames that run them, the
// threads' names and waits as the runtime knows them (a Java monitor and
// its holder, CPython's GIL) and the process's facts (a safepoint held
// up) into the snapshot (Apply). What only some runtimes answer is an
// optional interface, as io.WriterTo is of an io.Reader: Sampled
// (CPython's frames read as each sample arrives, kept behind handles and
// spliced when the samples are named), CodeNamer (the JVM's code cache,
// a JIT source when the JVM writes no perf map), Flagger (HotSpot's -XX
// flags, which its attach mechanism needs). The model's types cross
// (model.Location, model.Wait, model.Snapshot); the readers' own types
// stay behind the adapters. A descriptor whose Reader is nil leaves the
// runtime's frames to its JIT's symbol files and to the collectors that
// read them.
package runtimes
