// Package report turns what a capture collected into what people and tools
// read: pprof profiles, thread dumps, and the text, HTML and folded
// renderings of a capture.
//
// # Profiles
//
// BuildProfile makes profile.pb.gz from symbolized samples. Sample types, in
// order: cpu-samples/count, cpu-time/nanoseconds, off-cpu-time/nanoseconds,
// wall-time/nanoseconds (on- plus off-CPU; the default, so `go tool pprof`
// shows where the threads spent the window, running or not). String labels:
// "thread id" (decimal tid, as Datadog's profilers write it), "thread name",
// "phase" ("before": flight recorder; "during": after the trigger; absent in
// `stallwatch record`), and on off-CPU samples "off-cpu" ("blocked", or
// "preempted" when the thread stayed runnable and waited for a CPU).
// Identical stacks with identical labels are one pprof sample. Kernel frames
// sit in the mapping "[kernel.kallsyms]"; inlined functions are several
// lines of one location, innermost first. Every mapping that has locations
// is marked HasFunctions: symbolization happened at capture time against
// the target's own files, and pprof must not redo it against the reader's.
//
// BuildThreads makes threads.pb.gz from a snapshot: threads/count, one
// sample per thread whose stack is the kernel stack above the user stack;
// labels "thread id", "thread name", "state" ("S (sleeping)"), "wchan",
// "syscall", "waits for", and numeric "blocked" (ns off the CPU, when
// known), "runqueue wait" (ns, total), "owner tid" and "process_id" (the
// pid, which ThreadsFromProfile reads back). A thread without a
// readable stack has the single frame "[no stack]" (with the reason).
//
// # Thread dumps
//
// WriteThreadDump writes the text form: the lock graph on top (deadlock
// cycles, chains of waiters), then identical stacks merged with their
// threads, waiting threads first. WriteThreadDumpJSON writes every field of
// the snapshot; ReadThreadDumpJSON reads it back.
//
// # Capture directories
//
// The capture directory and capture.json belong to package capdir; this
// package renders its files. CaptureFiles renders all of them for
// capdir.Root.Write (and sets the capture's findings in capture.json:
// kind, severity, a sentence and the threads named, the same list the
// reports open with); ReportFiles renders report.txt and report.html again
// after capdir.Root.Update. Open reads back what a user names (a capture
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
