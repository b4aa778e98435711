// Package addrspace owns what is known of one target process's address
// space: its executable mappings (read again at each Refresh, those that
// went away kept for code that ran before), the object file behind each
// (opened once per file through the target's root or map_files, parsed
// by package internal/objfile), the load bias of each mapping, and the
// one reader of the target's memory (process_vm_readv, bounded).
//
// A process whose main thread exited while others run (pthread_exit in
// main) has a zombie leader whose own maps are empty: every process-wide
// /proc file is read through a live thread instead (procfs.Via).
//
// Names (package symbolize) and stack walks (package internal/unwind)
// are built over a Space; package target owns one Space per target and
// shares it between them.
package addrspace
