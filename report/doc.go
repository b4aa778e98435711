// Package report turns what a capture collected into what people and tools
// read: pprof profiles, thread dumps, and the text, HTML and folded
// renderings of a capture. What it renders is the capture model's
// (package model: the samples, the snapshot, capture.json's facts); it
// imports no collector, so `stallwatch report` links no sampling, ptrace
// or /proc code.
//
// # Profiles
//
// BuildProfile makes profile.pb.gz from symbolized samples (model.Sample).
// Sample types (their names are package model's constants), in order:
// cpu-samples/count, cpu-time/nanoseconds, off-cpu-time/nanoseconds,
// wall-time/nanoseconds (on- plus off-CPU; the default, so `go tool pprof`
// shows where the threads spent the window, running or not). String labels:
// "thread id" (decimal tid, as Datadog's profilers write it), "thread name",
// "phase" ("before": flight recorder; "during": after the trigger; absent in
// `stallwatch record`), "process_id" (decimal pid, as ddprof writes it), and
// on off-CPU samples "off-cpu" ("blocked", or "preempted" when the thread
// stayed runnable and waited for a CPU). The numeric label
// "end_timestamp_ns" is when the sample ended, in nanoseconds since the
// Unix epoch (an on-CPU sample's moment, the end of an off-CPU interval),
// as Datadog's profilers stamp samples for their timeline; samples with a
// time stay apart, samples without one merge by stack and labels. Kernel frames
// sit in the mapping "[kernel.kallsyms]"; inlined functions are several
// lines of one location, innermost first. Every mapping that has locations
// is marked HasFunctions: symbolization happened at capture time against
// the target's own files, and pprof must not redo it against the reader's.
//
// A capture's samples are built once into a table (table.go): each
// distinct stack and label set once, the samples as columns. Package
// capture feeds it sample by sample as it resolves them (TableBuilder,
// Capture.SetTable), numbering each stack it resolved once at its first
// sample and a label set where a run of one thread's samples begins, so
// that no slice of a hundred thousand samples is made only to be read
// back and looked up again; Capture.SetSamples builds the same table
// from a slice. Everything a capture's end
// writes reads it — profile.pb.gz, encoded straight from the columns as
// it is gzipped; the findings' samples (Capture.Samples); report.txt and
// report.html — so that no profile.Profile with a Sample and a NumLabel
// map per sample is made only to be read back. The reports' rankings
// (each sample type in each phase, the threads of their stacks and of
// each wait) read the samples summed by stack and label set once
// (stacks.go's setSums), not the samples. A profile read from a
// file becomes such a table too, and renders through the same code.
//
// BuildThreads makes threads.pb.gz from a snapshot: threads/count, one
// sample per thread whose stack is the kernel stack above the user stack;
// labels "thread id", "thread name", "state" ("S (sleeping)"), "wchan",
// "syscall", "waits for", and numeric "blocked" (ns off the CPU, when
// known), "runqueue wait" (ns, total), "owner tid" and "process_id" (the
// pid, which ThreadsFromProfile reads back). A thread without a
// readable stack has the single frame "[no stack]" (with the reason).
//
// # Findings
//
// The reports say the findings capture.json holds (package analysis draws
// them, once, when the capture is made); they draw none of their own.
// Samples reads a profile's samples back into the capture model, the form
// the findings are drawn from: summed by stack, labels and kind (on or
// off the CPU), a few thousand sums for a recording's hundred thousand
// samples, the times they drop kept as each phase's span. Words, frames and stacks are written as
// package internal/textfmt writes them, for the findings and the
// renderings alike.
//
// # The kernel and what threads wait on
//
// capture.json's kernel context (kernel.go) is one line of report.txt's
// first screen (the quota's throttling, PSI, steal) and whole in its
// details and in report.html: cgroups, each quota and its throttling,
// memory cgroups, PSI, the host's CPU, memory and disks, the threads with
// the most major faults and preemptions; the flight recorder's history's
// beside it. "Waiting on" groups the snapshot's waiting threads by what
// they wait on (model.Wait.Subject: a socket by its peer, a file by its
// path, a lock by its owner), the longest waits first, with the off-CPU
// time and stacks of each group's threads, beside the stacks view (in
// report.txt's details and in report.html).
//
// # report.html
//
// One file: the findings with links, then the notes (folded: what the
// capture could not see is never louder than what it found), a timeline of
// every thread (from the samples' end_timestamp_ns; and from the snapshot,
// since when a blocked thread had been off the CPU), a flame graph or
// icicle with zoom, search and the matched share, on-CPU, off-CPU or wall
// time before or during the stall — opening on on-CPU time during the
// stall when anything ran, else off-CPU —, a time range picked in the
// timeline, the thread table and the dump one thread at a time. A stack
// cut short enters the flame graph at its outermost known frame, marked as
// having unknown callers with the reason, not at its "[truncated: …]"
// marker. The data is JSON in the page (page.go: one
// string table, frames and a call tree as integers, samples as columns,
// the columns appended to the JSON as they are encoded, the rest of it
// json.Marshal's);
// the viewer is assets/report.js, with every name the target chose written
// as text, never as HTML. Nothing is fetched.
//
// # Exports
//
// WriteFolded writes stacks as stackcollapse-perf.pl does with --tid
// --kernel --jit (the thread first, kernel frames ending in "_[k]", JIT
// frames in "_[j]"); WriteSpeedscope writes speedscope's file format, a
// sampled profile per thread in time order. Both filter by phase.
//
// # Thread dumps
//
// WriteThreadDump writes the text form: the lock graph on top (deadlock
// cycles, chains of waiters), then identical stacks merged with their
// threads, waiting threads first. The JSON form (threads.json) is the
// model's (model.WriteSnapshotJSON, ReadSnapshotJSON).
//
// # Capture directories
//
// The capture directory and capture.json belong to package capdir; this
// package renders its files. CaptureFiles renders all of them for
// capdir.Root.Write (CaptureProfile is the profile.pb.gz it writes);
// ReportFiles renders report.txt and report.html again after
// capdir.Root.Update. Open reads back what a user names (a capture
// directory, capture.json, a thread dump, any pprof file), Load an open
// capture directory.
//
// # Inputs are untrusted
//
// What Open reads may come from anywhere: only regular files are opened
// (a FIFO or a device is refused without blocking), sizes are checked
// before reading, a profile is bounded by MaxProfileBytes on disk and
// after gzip decompression (done here: pprof's own reader has no bound),
// and a cancelled context stops a read. Capture.ReadFrom tells a caller
// that an output path would overwrite an input.
package report
