// Package symbolize turns addresses sampled from a target process into
// frames a person can read: kernel functions from /proc/kallsyms, native
// functions (with file, line and inlined calls where the binary has them)
// from ELF files read through the target's root, and JIT-compiled
// functions from the target's jitdump and perf-map files at the time each
// sample was taken. What it makes is the capture model's: a
// model.Location per address, with its model.Mapping and inlined
// model.Lines.
//
// A Process names the addresses of one target over what package target
// knows of it (its mappings and their files, package internal/addrspace;
// its JIT sources, package jit), read at capture time: the target may be
// gone by the time a report is written. Locate and LocateStack resolve
// addresses; Refresh takes in what the JIT sources gained. Files are read
// by package internal/objfile, once per file for every target; names are
// cached per address, never worked out twice.
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
//   - Python: frames read from a CPython interpreter's memory (package
//     runtimes/cpython) are locations of kind KindPython in the pseudo
//     mapping "[python]", made by package target.
//   - JIT: package jit's time-aware index, for anonymous executable
//     memory, for addresses in no mapping, and for file code that no
//     symbol names.
//
// An address nobody can name becomes an explicit "file+0xoffset",
// "[anon] 0xaddr" or "[unknown] 0xaddr" frame, and Stats counts it with
// the reason, so nothing is dropped silently. A stack whose walk ended
// before its thread's first function ends with a pseudo-frame saying why
// (CutLocation: "[truncated: no unwind info in libfoo.so]").
//
// Names are those gdb prints (runtimes.Demangle, the one demangler, which
// names a JIT's C++ functions the same way): C++ and Rust demangled with
// their scope and template arguments but no parameters or return type,
// inlined C++ functions qualified by their namespaces and classes, PLT
// stubs as "name@plt", Go functions without their ABI suffix.
//
// Everything read comes from the target and is untrusted: package
// internal/objfile checks what it parses; names are bounded before they
// reach the demangler.
package symbolize
