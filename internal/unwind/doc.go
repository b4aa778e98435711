// Package unwind walks the user stack of a thread of another process: from
// a thread's registers (instruction, stack and frame pointers) and a way to
// read its memory, it returns the program counters of the active frames,
// innermost first.
//
// Two methods are combined. Where a module carries DWARF call frame
// information (.eh_frame, which every C and C++ object compiled by GCC or
// Clang has, including Debian's libc that has no frame pointers), a frame
// is unwound by the rules the compiler wrote for that exact instruction.
// Elsewhere (Go code, JIT-compiled code, hand-written assembly without CFI)
// the frame-pointer chain is followed. Every walk is bounded in frames and
// in work, and every value read from the target is validated: the target's
// stack and its files are untrusted input.
//
// A Process holds the call frame tables of one target, parsed once per
// file and shared between processes that map the same file.
package unwind
