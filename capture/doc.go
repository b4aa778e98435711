// Package capture runs one capture of a target process and writes it to
// disk: the sampler's flight recorder and a burst of high-rate sampling,
// the thread snapshot, symbolization at each sample's time, and the capture
// directory (profile.pb.gz, threads.pb.gz, report.txt, report.html,
// capture.json). `stallwatch record` and the watchdog both capture through
// it; the watchdog decides when, this package decides how.
//
// It gathers the facts of a capture into capture.json (capdir.NewInfo and
// the counts, settings and notes), has package analysis draw its
// findings, once, from what the directory will hold, has package report
// render the files, and has package capdir write them: the output
// directory is opened once, when a Session opens or a recording starts,
// so that an unsafe or unwritable --out is refused before anything is
// sampled. A capture hands back a model.Result (directory, capture.json,
// findings), the type its callers share without importing this package.
//
// A CPython target's samples carry the Python frames that ran: the
// sampler wakes at every record, and as each sample whose user stack
// runs through the interpreter's evaluation function is decoded, the
// sampled thread's frames are read from the interpreter's memory (the
// annotator of a runtime reader that reads samples, runtimes.Sampled:
// CPython's) and kept once each behind 8-byte handles, in the flight
// recorder too; at symbolization they take the place of the evaluation
// frames (runtimes.Annotator.Splice). They are what ran when they were
// read, after the sample: the delay is measured for every sample and
// capture.json gives its median and 99th percentile,
// the bound on their error (0.1 ms and tens of ms on a loaded 2-core
// machine; TestPythonAttribution: 96–99% of samples in the interpreter
// attributed to the function that ran).
//
// Stack copies (--unwind cfi) grow per thread unless Config.StackCopy
// fixes their size: they start at DefaultStackCopy (16 KiB: the stacks of
// most programs need less, BenchmarkStackCopySize) and a thread whose
// stacks are deeper has its copies doubled by the sampler, up to
// MaxStackCopy (sampler.Config.GrowStackCopy). The flight recorder's
// sampler is the captures' and continuous profiling's, so a thread grown
// before a trigger is sampled whole from the trigger's first moment;
// capture.json gives the ceiling (settings.stack_copy_max_bytes) and the
// threads that grew (stack_copy_grown), a note names them, and the
// advice of a larger --stack-copy is given only for a fixed size.
//
// Each capture reads the target's kernel context (package
// internal/kernelctx, kernel.go) at its start, beside the snapshot, and at
// its end, beside the resolving of its samples, with every thread's
// counters; a Session with a flight recorder also reads it every quarter
// of its history (at least every second, at most every 30 s), without
// them, so that capture.json has the history's as well
// (kernel_context_before).
//
// A capture's samples are resolved straight into the table of its
// profile (resolver.build, report.TableBuilder): each distinct stack of
// addresses is symbolized once (the stack memo, which compares the
// sample before's stack first; not a stack in JIT code, named at its
// sample's time, nor one with Python frames put in) and numbered in the
// table at its first sample, every later sample of it handing over that
// number, the number of its label set (asked of the table where its
// thread, process or kind differ from the sample before's), its weight
// and its end time; no slice of model.Sample is made.
// Continuous profiles' periods resolve into such a slice (BuildProfile),
// which they also read for the runtime.
//
// What is known of the target (package target: its files, unwind tables,
// symbols, JIT sources, memory) is opened once per Session and shared by
// the snapshot and the resolving of every capture's samples; it is
// refreshed at the start of each capture (code loaded since) and before
// its samples are resolved.
//
// A JVM (as runtimes.JVM recognises one: the libjvm.so it maps) is asked
// at the start of each capture, beside it, for its perf map, through its
// attach mechanism (package runtimes/hotspot/attach, within a second);
// one that cannot answer (held at a safepoint) or may not be asked has
// its code named from its code cache, read from its memory by its
// reader (runtimes.CodeNamer). Where its memory cannot be read at all, its Java threads come
// from its own thread dump, asked once the snapshot's stops are over.
// The notes say which path gave the names and the threads (jvm.go).
//
// # Continuous profiles
//
// A Session with Config.Profile samples between captures at ProfileFreq
// (or the flight recorder's rate, when higher) and cuts what it samples
// into periods (Session.Period, period.go): each period ends where the
// next begins (sampler.Recording.Cut), so every sample is in exactly one;
// it is symbolized at each sample's time and built into a profile with a
// capture's labels, stamped inside the period. A stall capture raises the
// rate and records beside the period, whose samples therefore include the
// capture's (a note names it). After each period what no open recording
// can still need is forgotten (target.Forget): JIT code replaced before
// the horizon — the next period's start, the capture in progress and the
// flight recorder's history — and the symbolizer's caches past their
// bound. A JVM is asked for its perf map at each period's end, as at a
// capture's start. Between captures the target's maps are read at each
// period's end, and again (four times a second at most, beside the
// sampler) when a sample's stack returns into memory they did not have
// as executable — a JIT's code mapped since: V8 commits its code space
// as it compiles. Package continuous schedules the periods and writes
// and ships them.
//
// # Descriptors
//
// Sampling holds a file descriptor per perf event and thread, and a
// capture must never be lost to running out of them. When a Session
// opens (or a recording starts) it plans, once, with sampler.PlanFDs:
// the soft RLIMIT_NOFILE goes up to the hard one, and the capture's need
// (threads × events, what is open, headroom for the capture's files) is
// set against it. A shortfall is logged once, at start-up, with the
// numbers and the fix; the session then samples less (the tracker
// folded, off-CPU dropped, then the busiest threads) — the same for the
// flight recorder and every capture, each of whose capture.json carries
// the plan as a note and counts.unsampled_threads.
//
// A capture writes whatever it has: when its sampler cannot start (or
// the plan leaves room for no thread) it writes the snapshot alone, and
// when raising the rate fails for some threads it samples the others;
// either way a note says what was lost and why.
package capture
