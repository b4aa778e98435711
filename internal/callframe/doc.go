// Package callframe reads DWARF call frame information — the rules a
// compiler writes for every instruction of a function, saying where its
// caller's registers and return address are — and evaluates the DWARF
// expressions those rules may hold.
//
// A Table is one module's .eh_frame (ParseEhFrame; EhFrameSection finds
// it in an ELF file, through .eh_frame_hdr when the file has no section
// headers) or .debug_frame (ParseDebugFrame), with the code ranges of
// its FDEs; RowAt runs the CIE's and the FDE's instructions up to an
// address and gives the Row in force there (the CFA, a Rule per
// register, whether the frame is a signal trampoline), cached per
// address. EvalExpr evaluates DW_CFA_def_cfa_expression and
// DW_CFA_expression programs over a RegState and the target's Memory,
// supporting what call frame information may use. Registers are
// x86-64's DWARF numbers.
//
// The sections come from ELF files (package internal/objfile finds them
// and keeps each Table with its file) and from the unwinding information
// JIT compilers publish in their jitdump (package target): package
// internal/unwind walks stacks with them. This package knows neither
// files nor processes, only the bytes of a section and the memory an
// expression reads.
//
// Everything read comes from the target and is untrusted: every read is
// bounded by its section (a failure names the section and the offset),
// sections are bounded in size, instruction programs in their state
// stack, expressions in their steps and their stack; FuzzEhFrame and
// FuzzExpr check that no input panics, runs away or allocates beyond a
// bound of its size.
package callframe
