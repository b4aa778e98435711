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
package target
