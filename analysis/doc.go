// Package analysis draws a capture's findings: what the first screen of
// a report says and capture.json's findings hold, each a kind, a
// severity, a sentence, the numbers behind it and what to do, and the
// threads and functions it names, the most likely cause first. Alerts and
// hooks (STALLWATCH_TOP_FINDING) send on what it found; the renderings
// (package report) say it. It runs once, when a capture is made (package
// capture), and for a profile or thread dump read without its
// capture.json (`stallwatch report`).
//
// It reads the capture model alone (package model): capture.json's facts
// (the kernel's numbers among them: the kernel context package
// internal/kernelctx reads), the samples as profile.pb.gz keeps them
// (report.Samples reads them, at capture time from the profile about to
// be written, summed by stack and labels: every finding is drawn from
// sums, and the judged window from each phase's span of sample times), and the thread snapshot as threads.json keeps it, so that
// a capture read back gives the findings it was written with, with no
// root and no live process.
//
// Thresholds are shares of the judged window (after the trigger, or the
// whole capture), never fixed durations, so that a 3-second capture and a
// 60-second one are judged alike. Stacks are read as a report reads them
// (package internal/textfmt: frames by function name, the program's own
// code told from libc's and the runtime's wrappers).
//
// What it knows of each language runtime is package runtimes': how a
// capture's runtime is recognised (from its executable, its libraries,
// its frames; capture.json's runtime records it), the functions of its
// pauses, the switch that names its JIT code.
//
// The findings, in the order they explain a stall: a stopped process (a
// signal, a debugger); deadlocks (cycles of the waits-for graph); a
// language runtime's pause (HotSpot's SafepointSynchronize, Go's
// stopTheWorldWithSema, CoreCLR's ThreadSuspend, Julia's
// jl_safepoint_wait_gc and jl_gc_wait_for_the_world), naming the thread
// that holds it up; a Node.js event loop that does not return to poll;
// CPython threads waiting for the GIL (take_gil) and its holder; threads
// blocked on a descriptor whose other end is another process (a socket's
// peer, a pipe's reader), by pid and state — the snapshot's Wait.On; lock
// convoys; OOM kills; CPU throttling by the quota of the process's
// cgroup or one above it; memory pressure, by the kernel functions of its
// threads' stacks (direct and cgroup-limit reclaim, compaction, swap-in,
// writeback throttling, pages faulted back after reclaim); I/O, with the
// files and disk waited on; threads in uninterruptible sleep, by the
// kernel function; the hypervisor's steal; CPU starvation, with the
// host's load and none of the causes the kernel's numbers rule out; a thread that spins while others
// wait, or one that has most of the CPU; JIT code without names, with the
// switch that makes each runtime's JIT code readable; and a process in
// which nothing ran.
package analysis
