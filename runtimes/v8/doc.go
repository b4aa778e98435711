// Package v8 reads the JavaScript frames of a V8 process (Node.js) from
// its memory, from the outside, without the process's help and without
// changing it: no flag at start (--perf-basic-prof names JIT code, but a
// frozen process cannot be restarted with it), no inspector, no signal.
//
// V8 publishes its object and frame layout for debuggers: every Node.js
// binary holds some 530 v8dbg_* data symbols (tools/gen-postmortem-
// metadata.py: field offsets, instance types, frame slots, tag masks),
// read by LoadLayout through a small Symbols interface (objfile.File is
// one). llnode and the OpenTelemetry eBPF profiler's V8 unwinder read the
// same table; this package was written from V8's sources and from what a
// live Node.js 20 holds, not from theirs.
//
// A JavaScript frame keeps, below its frame pointer, its context (or, in
// a typed frame, a Smi marking the frame's type) and its JSFunction. The
// reader follows JSFunction → SharedFunctionInfo → its name (a String, or
// the ScopeInfo that holds it) and Script → its name, and finds the line:
//
//   - interpreted (Ignition): the frame holds the BytecodeArray and the
//     bytecode offset; the array's source position table gives the
//     script offset, the script's line ends the line and column;
//   - baseline (Sparkplug): the Code's bytecode offset table maps the pc
//     to a bytecode (with the bytecode sizes the binary exports), then as
//     interpreted code;
//   - optimized (Maglev, Turbofan, on-stack replaced code): the Code
//     whose instructions hold the pc (the function's, or found below the
//     pc by its InstructionStream) maps the pc to a source position with
//     an inlining id, and its deoptimization data names the inlined
//     functions: one frame of machine code can be several JavaScript
//     frames, innermost first, as V8's own stack traces show them.
//
// The names and lines are those of V8's own stack trace (Error.stack):
// the function's debug name (its name, else the one V8 inferred), the
// script's name, the line and column of the call or of the instruction.
// Error.stack also prefixes a method's receiver type ("Module._compile"
// is the inferred name, but "Timeout._onTimeout" is the receiver's
// constructor and property name for an anonymous function): that comes
// from the receiver, which the frame does not keep, and is not given.
//
// # What is not read, and why
//
//   - Pointer compression (tagged fields of 32 bits from a cage base no
//     symbol gives; Chrome, not Node.js) and 32-bit builds: NewLayout
//     refuses them.
//   - Optimized code's lines and inlined functions need the Code object's
//     layout, whose offsets V8 11 stopped publishing: they are derived for
//     V8 11.1.204 to 11.4.58 (Node.js 20) and checked on every use; other
//     versions name the frame's function without its line.
//   - A function V8 has not collected source positions for yet (they are
//     collected lazily, when a stack trace or a profiler needs them) has
//     no line: Frame.LineErr says so.
//   - The receiver's type in method calls (above); async stack traces.
//   - Sampled stacks: they are resolved after the capture, and a frame's
//     JSFunction is often a young object that the next scavenge moves, so
//     what its address holds by then may be another function. Reading
//     sound names needs the read at the sample's moment (an eBPF reader
//     does it in the kernel); stallwatch reads frames for the snapshot,
//     while each thread stands still, and samples keep the JIT's own names
//     (--perf-prof, --perf-basic-prof).
//
// # Untrusted memory
//
// Everything read comes from the target: every object is checked for the
// instance type its referrer promises before it is followed, every length
// against a bound, string nesting against a depth; each question (Frame)
// reads at most maxReads times and maxReadBytes in all, and never
// allocates from a size it read beyond what it reads. Garbage, cycles and
// truncated structures give an error (ErrNotFrame, *TypeError,
// *ReadError, ErrBudget), never a panic; FuzzFrame checks it.
//
// A Reader remembers functions, scripts and Code objects it read, keyed
// by what their objects held, so that an object a collection moved is
// read again. A frame read while its thread runs may be read as its
// objects are being moved: read the frames of a thread while it is
// stopped (V8 moves objects only while every thread of the isolate is
// stopped for a collection).
package v8
