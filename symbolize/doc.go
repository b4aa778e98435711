// Package symbolize turns addresses sampled from a target process into
// frames a person can read: kernel functions from /proc/kallsyms, native
// functions (with file, line and inlined calls where the binary has them)
// from ELF files read through the target's root, and JIT-compiled
// functions from the target's jitdump and perf-map files at the time each
// sample was taken.
//
// A Process holds everything about one target that symbolization needs,
// read at capture time (the target may be gone by the time a report is
// written): NewProcess reads the maps and opens the mapped files and JIT
// sources, Refresh reads them again at the end of a capture (keeping
// mappings that went away), Locate and LocateStack resolve addresses.
// Work is cached per file and per address, never done per address twice.
//
// Where names come from, best first:
//
//   - kernel: /proc/kallsyms, bounded by _etext and by module ranges from
//     /proc/modules; "[kernel]" when the kernel hides its addresses.
//   - native: the file's .symtab, else its separate debug file (found by
//     build id under <debugdir>/.build-id/, or by .gnu_debuglink with its
//     CRC checked), else its MiniDebugInfo (.gnu_debugdata, xz), merged
//     with .dynsym; lines and inline chains from DWARF (the file's or the
//     debug file's), or from the Go pclntab. The load bias comes from the
//     program headers and the mapping's file offset.
//   - vdso: the image in the target's memory.
//   - JIT: package jit's time-aware index, for anonymous executable
//     memory, for addresses in no mapping, and for file code that no
//     symbol names.
//
// An address nobody can name becomes an explicit "file+0xoffset",
// "[anon] 0xaddr" or "[unknown] 0xaddr" frame, and Stats counts it with
// the reason, so nothing is dropped silently.
//
// Everything read comes from the target and is untrusted: sizes are
// checked against the file before anything is allocated from them, the
// standard library's parsers run behind a recover, and DWARF and xz
// headers that those parsers would trust are checked first.
package symbolize
