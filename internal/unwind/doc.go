// Package unwind walks the user stack of a thread of another process: from
// a thread's registers (instruction, stack and frame pointers) and a way to
// read its memory, it returns the program counters of the active frames,
// innermost first.
//
// Three methods are combined, per frame. Where a module carries DWARF
// call frame information (.eh_frame, which every C and C++ object compiled
// by GCC or Clang has, including Debian's libc that has no frame pointers),
// a frame is unwound by the rules the compiler wrote for that exact
// instruction. Go code is unwound by its binary's pclntab frame sizes, as
// Go's own traceback does. Elsewhere (JIT-compiled code, hand-written
// assembly without CFI) the frame-pointer chain is followed. Every walk is
// bounded in frames and in work, and every value read from the target is
// validated: the target's stack and its files are untrusted input.
//
// The tables come from package internal/objfile (parsed once per file for
// every target); a Process places them where one target maps them (package
// internal/addrspace), once when it is made and at each Refresh, never
// during a walk, which may run while a thread is stopped. JIT code is
// unwound with the rules its runtime published (JITCode, set by package
// target).
//
// How a frame at an address is unwound (its mapping and the call frame
// row in force there) is cached per Process in a fixed table of 4,096
// entries keyed by the address and the layout generation (each Refresh
// starts a new one), shared by concurrent walks without a lock: a warm
// frame costs a probe and the stack reads its rules name, rather than a
// search of the mappings and the module's FDEs. A row of the form nearly
// all compiled code has (the CFA a register plus an offset, the return
// address and saved registers at offsets from it, no expression, not a
// signal frame) is kept compiled beside it (flatRule), and a warm frame
// is unwound from the entry alone, in place, without the row's table of
// rules, as a warm frame of code without rows (JIT code) is by its frame
// record; anything a flat step cannot take as it is (a read that fails, a
// frame that does not climb, the stack's end) is left to the general
// rules, which decide it and say why (TestFlatStepIsCFIStep,
// TestWarmFPStepIsFPStep). Rows from an ELF file's
// own tables hold for the layout. JIT code's hold for what its JIT said
// (JITCode): the sample times over which the code it found at the
// address (or that it found none) is the answer, in the JIT's generation
// the answer was given in, and in each later one where no code was
// loaded, moved or freed at the address (JITCode.Unchanged: package jit's
// Index.ChangedSince); so code replaced at an address is asked for again
// at the first sample after its JIT's files say so. SetRuleCache(false)
// walks without any of the caches, for comparison.
//
// The checks of callers (below) are cached too. A function's extent at
// an address is kept in a second table of 4,096 entries, like the rules.
// A verdict on a caller is kept per return address and the functions
// returned from and under (a map of at most 65,536, emptied when full,
// behind a lock-free table of the 4,096 looked up last, and in front of
// both a lock-free table of 4,096 by the exact addresses a check is asked
// of: the return address and the pcs of the frames below and under it,
// so that a warm caller costs one probe and not the two functions'
// extents; an entry there holds in the layout generation it was kept in
// and, where its verdict or those extents depended on JIT code, in that
// JIT generation for the sample times all of them held); one that read JIT
// code or asked the JIT holds only in the layout and JIT generations it
// was decided in, for the sample times the JIT's answers held, and for
// samples taken at most jitBytesFor (1 s) after the code was read: a
// runtime may patch code in place, or reuse code nobody describes, with
// no record of it, and a walk that reads the code as it unwinds reads it
// after the sample too. Memory, per Process, at most: rules 32 KiB of
// slots + 4,096 entries of 168 bytes; extents 32 KiB + 4,096 × 64 bytes;
// verdicts 32 KiB of slots in front of a map of 65,536 of about 150
// bytes (the front's entries are the map's, read in place); verdicts by
// exact addresses 32 KiB + 4,096 × 80 bytes (pointing at the map's); the sweeps
// of 4,096 call targets (a function's calls and jumps each): about 8 MiB
// and the sweeps for a target whose stacks reach that many distinct
// callers, under 1 MiB for the few thousand of a typical service. The tables of extents and verdicts are made at a
// Process's first walk.
//
// A sampled stack (UnwindSample) is walked in the copy of the stack the
// sample carries; beyond it, the kernel's frame-pointer chain is joined at
// the frame record both walks reached (the walk's frame pointer is one of
// the records the kernel followed from the sample's), never at a return
// address both happen to hold. With no copy the kernel's chain is the
// walk. A walk that needed the kernel's chain because its copy ran out
// ends as the copy's end (CopyExhausted) wherever that chain stops: code
// with call frame information but no frame pointers ends the chain, and a
// larger copy is what reaches further — unless the kernel copied less
// than it was asked (Cut.Short: the stack's next page was not resident,
// or the stack ended), which no larger copy changes.
//
// No caller is guessed (verify.go). Frames found by exact rules (CFI, Go
// frame sizes) are taken as they are; a caller found by a rule that
// guesses — the kernel's chain, the walk's own frame-pointer fallback, a
// blocked thread's stack scan — and every caller after it, is taken only
// where the code proves it possible: the instruction before the return
// address is a call, and a direct call calls the function of the frame
// below, or one that jumps there (a tail call, a cold part), or one that
// calls it from one place: then that function's frame is what the chain
// skipped (a frameless leaf's caller, which the kernel's chain jumps
// over), and it is put back. The call instructions are decoded by a small
// bounded decoder of call encodings (x86.go); a call target's code is
// swept with golang.org/x/arch's decoder, which knows every instruction's
// length. Anything else ends the walk: NotACall, WrongCallee.
//
// Go's stacks end where Go's own traceback ends them: runtime.goexit (its
// planted return address follows a NOP, not a call), runtime.mstart and
// rt0_go. mcall and morestack call their callee at the bottom of the
// thread's system stack with the frame pointer zeroed; the walk goes on
// at g0.sched.pc, in mstart0, to mstart (objfile.GoRuntime), checked
// against the stack where the copy or the live stack holds it (a cgo
// callback moves that bottom; without a copy, a cgo binary's chain stops
// there). systemstack keeps a frame record on the goroutine's stack, and
// its caller is found by it.
//
// Every walk says why it ended (Cut, the capture model's model.Cut):
// complete, or cut short too deep, for want of unwind information in a
// module, at the end of the stack copy (or where the kernel cut the copy
// short), at an address that is not code, at a caller its call site
// refutes, at a bad frame or a stack switch.
package unwind
