// Package cpython reads the state of a CPython interpreter (3.8 to 3.13)
// from another process's memory, with nothing asked of the target: no
// flag at its start, no code run in it. It finds the runtime
// (_PyRuntime), its interpreters, each thread state and the kernel thread
// it belongs to, each thread's Python frames — qualified function name,
// file and line — and the GIL: who holds it, and where the threads that
// wait for it sleep.
//
// It is a pure reader over two small interfaces: Memory (a bounded
// ReadAt, which *addrspace.Memory is) and Symbols (a lookup of an image's
// symbols by name, which package target builds from internal/objfile).
// It needs no privilege of its own and runs on any bytes: the fuzz tests
// feed it garbage.
//
// # Finding the runtime
//
// _PyRuntime is a dynamic symbol of every build, static or shared,
// stripped or not (Debian's python3 drops .symtab but keeps .dynsym).
// Where no symbol names it, the .PyRuntime section (3.11+) starts with
// it; failing both, the image's .data and .bss are scanned for the word
// whose interpreter's first thread state points back to that interpreter.
// The version comes from _Py_DebugOffsets (3.13+, the "xdebugpy" cookie
// at the start of _PyRuntime), else Py_Version (3.11+), else the image's
// name (libpython3.9.so.1.0, python3.10). A version it does not read is a
// *VersionError naming the versions it does (Known).
//
// # Layouts
//
// Where each field lies is a table per minor version (Layout), derived
// from that version's own headers: testdata/offsets.c prints offsetof()
// of every field read when compiled against a version's headers, and a
// test compares it with the tables for every version installed. 3.13's
// _Py_DebugOffsets replaces the table's offsets with the target's own,
// and differences are noted.
//
// # Thread ids
//
// 3.11+ thread states hold native_thread_id. Before, they hold only
// pthread_self(), a pointer to glibc's struct pthread, whose tid field's
// offset glibc publishes for libthread_db (_thread_db_pthread_tid);
// without it, the offset where every thread state's structure holds one
// of the process's tids (Options.TIDs) is used.
//
// # Frames
//
// 3.8–3.10 thread states point to a PyFrameObject chain (f_back), each
// frame run by its own call of _PyEval_EvalFrameDefault; the line comes
// from f_lasti through co_lnotab (3.8, 3.9) or 3.10's co_linetable. 3.11+
// point to _PyInterpreterFrames (through a _PyCFrame on the C stack in
// 3.11 and 3.12), where one evaluation call runs many Python frames:
// Frame.Entry marks the first frame of each call (is_entry in 3.11; in
// 3.12+ the frame above the shim frame the call pushes, owned by the C
// stack), so that Python frames can be put in place of the native
// evaluation frames of a stack. The line comes from the instruction
// pointer through the location table. Frames that have not begun (before
// _co_firsttraceable) are left out, as Python's own tracebacks leave them
// out, unless they begin an evaluation call.
//
// # Untrusted memory
//
// Everything is read from a target that may be changing it (a thread is
// not stopped unless the caller stopped it) or that holds garbage: every
// read is bounded (a structure at most 8 KiB, a name 512 characters, a
// path 4,096, a line table 1 MiB), every pointer checked, every object's
// type checked against the exported type objects (PyCode_Type,
// PyUnicode_Type, PyBytes_Type, PyFrame_Type) or their tp_name, lists and
// frame chains bounded (Options.MaxDepth, MaxThreads) and their cycles
// found, and each walk has a budget of reads. What cannot be read says
// what and where (*ReadError, *CorruptError, ErrCycle, ErrTooDeep), and a
// walk that ends early returns the frames it read.
//
// Reads go through a cache of whole pages emptied at each walk: a 3.11+
// thread's frames lie side by side in its data stack and cost a read or
// two; code objects (names, line tables) are remembered by address while
// their fields stay the same, and FramesCached, for readers of many walks
// in a row (a sampler, a snapshot), does not read again those checked in
// the last second: about three reads a walk.
//
// # Native stacks
//
// The package reads no native stack; it says how Python frames go into
// one: EvalFunctions (and InEval, by address) are the native frames that
// run Python code, and Calls splits a thread's frames into the calls of
// those functions, one to one with their native frames (tested on every
// version against the stacks a snapshot unwinds). Package target splices
// them; the snapshot reads a thread's frames under its ptrace stop, the
// capture's sampler as each sample arrives.
package cpython
