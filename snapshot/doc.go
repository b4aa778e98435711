// Package snapshot takes a picture of every thread of a process as it
// stands: state, what it waits in, how long it has waited, its kernel and
// user stacks, and which thread holds the lock it waits for: a
// model.Snapshot. It is the core of a hang report: a frozen process does
// not run, so a sampler sees nothing of it.
//
// A thread asleep in a system call — nearly every thread of a frozen
// service — is read without a stop: the stack and instruction pointers
// the kernel saved at its entry, from /proc/<pid>/task/<tid>/syscall, the
// top of its stack copied with process_vm_readv and unwound from them,
// and its schedstat read again after the walk, which proves it did not
// run meanwhile: a thread cannot run without the kernel counting it onto
// a CPU (asleep.go says why that suffices, and why the syscall line alone
// does not). Its stack is the one a stop
// gives, frame for frame; where it might not be — the thread woke, or
// its walk needs the frame pointer /proc does not show and no callee
// saved — that thread alone is stopped. Other user stacks are read under
// a brief per-thread ptrace stop (PTRACE_SEIZE and PTRACE_INTERRUPT, the
// registers and a copy of the stack top, then an immediate detach; the
// unwind with internal/unwind runs on the copy after it, and where the
// copy did not hold the walk, under a second stop with the live stack
// beyond the copy; a runtime that reads frames under the stop has the
// walk made there), or, with Options.NoPtrace, without any stop
// from /proc/<pid>/task/<tid>/syscall and process_vm_readv (a blocked
// thread's unwind then scans for the frame pointers it lacks). A
// thread's /proc files are read relative to its directory, opened once,
// a read each, the two read again kept open (taskfiles.go), with the
// worker's buffers. Threads in uninterruptible sleep, threads another
// debugger traces, and the main thread of a process whose parent is the
// caller (its stop would be reported to the caller's own wait for the
// child) are always read without a stop. No path leaves a thread stopped
// or traced: see stopThread. What the snapshot reads of the process (its
// files, unwind tables, symbols, memory) is a target.Process, shared with
// the caller's other readers of the same target.
//
// A stop that cannot be had says truly why, as a typed error of the
// model (which keeps it typed in threads.json): a kernel thread
// (model.ErrKernelThread) or stallwatch's own process
// (model.ErrOwnProcess) for the whole snapshot; another tracer holding
// one thread (*model.TracedError in that thread's Err: it alone is read
// without a stop); a missing capability the user can grant
// (*perms.Error); a refusal although permitted (*model.RefusedError,
// naming what was checked).
//
// A target's language runtimes are read through their descriptors'
// readers (package runtimes; target.Process.Readers opens those of the
// runtimes the target runs), with no runtime named here: each reading
// begins before any stop, reads what must be read of a thread while it
// stands still (runtimes.Reading.Stop, under its stop, or without one
// when it is blocked or under NoPtrace), and puts what it read into the
// snapshot once the native stacks are named and the stops are over
// (Apply), after the waits are refined by their native stacks (a
// runtime's wait is what the runtime says). So a Node.js target's
// JavaScript frames are read from its memory while each thread is
// stopped, or blocked in the kernel, and name the native frames V8's
// code runs them in (JIT code and the interpreter's trampoline become
// the function, script and line, as V8's own stack trace gives them, with
// the functions optimized code inlined; a stack needing more than the
// reader's bound of reads keeps the rest native, and a note says so). A
// CPython process has each thread's Python frames read under its stop
// and put in place of the interpreter's evaluation frames; a thread
// sleeping on a GIL's condition variable or mutex waits for the thread
// the GIL says holds it (Wait kind "gil"), whatever the binary names.
//
// Lock owners come from the futex words: a glibc pthread_mutex_t keeps
// its owner's tid beside the word, a priority-inheritance futex holds it
// in the word, pthread_join waits on the joined thread's tid. They make
// the waits-for graph (model.BuildLockGraph), whose cycles are deadlocks.
//
// A wait in a system call on a descriptor says what the descriptor is
// connected to (package internal/fdtarget, once for every thread at the
// end of the snapshot: one scan for the processes at the other ends, one
// read of each socket table): "write() on fd 7 → pipe:[4411] read by pid
// 812 (logger), which is stopped", in the Wait's Desc and, as data, its
// On.
//
// A HotSpot JVM's threads are also read as the JVM sees them, from its
// memory (package runtimes/hotspot, through runtimes.JVM's reader), once
// the stops are over and with none of their own: their Java names, their Java frames in place of
// the interpreter's and the code cache's frames in their native stacks
// (frames of threads running Java code start at the registers of their
// stop), the monitor or java.util.concurrent lock each waits for and the
// thread holding it (edges of the waits-for graph: Java-level deadlocks
// are its cycles), and, while a safepoint is being reached, the VM
// Thread's wait for the thread it waits for. Where the JVM's memory
// cannot be read, the capture leaves it unread (Options.Unread) and gives
// the snapshot the JVM's own thread dump instead
// (runtimes.ApplyJavaThreadDump).
//
// How long a thread has been off the CPU comes from the kernel's
// accounting (/proc/<pid>/task/<tid>/sched, se.exec_start) where the
// kernel has it, converted from the task clock of the CPU the thread last
// ran on to CLOCK_MONOTONIC by package internal/schedclock (the two differ
// by the steal time since boot on a virtual machine); else from a running
// sampler (Options.OffCPUSince); else it is unknown and a note says so.
// Our own stop wakes a blocked thread, and both then date its time off the
// CPU from the stop (a thread read without a stop keeps its accounting
// whole); a StopBook (stops.go) remembers since when each
// thread a snapshot stopped had been blocked, with its context-switch
// counts, and a later snapshot that finds the counts unchanged keeps that
// time and says it runs from before an earlier stallwatch stop
// (Options.Stops; by default the book of this stallwatch process;
// `stallwatch snapshot` keeps it in its runtime directory between runs).
package snapshot
