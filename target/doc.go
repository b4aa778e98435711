// Package target is the one owner of what is known about a target
// process: its address space (maps, the object file behind each mapping,
// its memory; package internal/addrspace), its JIT sources (package jit),
// the unwinder's tables (package internal/unwind) and the symbolizer
// (package symbolize). A Process is built once per target and shared by
// everything that reads the target: the snapshot, the resolving of
// sampled stacks in a capture, and a watchdog across all the captures of
// the target it watches.
//
// Object files are parsed once per stallwatch process whatever the number
// of targets (package internal/objfile); a Process adds only what is
// particular to one target: where each file is mapped, and its memory.
//
// The language runtimes a target runs are found here once, before any
// stop, for the readers of their state in its memory (Readers): each
// descriptor of package runtimes that has a Reader and recognises the
// target (by its executable's name, a library it maps, a symbol its
// executable exports) has its reader opened over what this package sees
// of the target (ReaderProcess: the Space's memory, each mapped file's
// symbols, sections and data at their run-time addresses, what is mapped
// where, the threads). Nothing here names a runtime: the collectors ask
// the instances (package snapshot, package capture).
//
// JIT code is unwound with the call frame information its runtime wrote
// in the jitdump for each piece of code (CODE_UNWINDING_INFO: CPython 3.13
// -X perf_jit, V8, LLVM's JITLink), at the time of each sample, since code
// and its tables can be replaced at one address. Each JIT index taken in
// starts a generation of the unwinder's JIT answers, and what it changed
// over the one before (jit.Index.ChangedSince) is logged for the last 64
// generations (unwind.JITCode.Unchanged), so that the unwinder's cached
// answers for code no new code touched are kept; CPython's perf
// trampolines, which 3.12's -X perf names only in a perf map (and 3.13
// writes through a buffered stream), are unwound by their known bytes,
// checked in the target's memory.
package target
