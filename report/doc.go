// Package report turns what a capture collected into what people and tools
// read: pprof profiles, thread dumps, the capture directory, and its text,
// HTML and folded renderings.
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
// known), "runqueue wait" (ns, total) and "owner tid". A thread without a
// readable stack has the single frame "[no stack]" (with the reason).
//
// # Thread dumps
//
// WriteThreadDump writes the text form: the lock graph on top (deadlock
// cycles, chains of waiters), then identical stacks merged with their
// threads, waiting threads first. WriteThreadDumpJSON writes every field of
// the snapshot; ReadThreadDumpJSON reads it back.
//
// # The capture directory
//
// WriteCapture writes OUT/<UTC time>-<pid>-<trigger>/ (for example
// 20260105T143012.345Z-4242-stall) into a hidden directory first and
// renames it into place, so a reader never sees it half written; each file
// is synced before. It holds profile.pb.gz, threads.pb.gz and threads.json
// (when there is a snapshot), report.txt, report.html and capture.json.
// UpdateInfo rewrites capture.json (and the reports) atomically; Prune
// keeps the newest captures.
//
// capture.json (schema 1; fields are added without a schema change):
//
//	schema              1
//	stallwatch_version  version that wrote it
//	trigger             "stall" | "signal" | "manual"
//	reason              why, in words ("no heartbeat for 10.2s")
//	heartbeat           the heartbeat source ("file /run/app.beat")
//	seq                 2 and up for recaptures of a stall that lasts
//	pid, command, executable, kernel (uname -r), hostname
//	start, trigger_at, end   RFC 3339 times: the sampled window (history
//	                    included) and the trigger
//	last_beat           the last heartbeat before the stall
//	recovered           the first heartbeat after it (UpdateInfo)
//	stall_ns            heartbeat silence at the trigger
//	stall_length_ns     the whole stall, last beat to recovery (UpdateInfo)
//	cut_short, cut_short_why   the capture ended early, and why
//	target_exited       the process exited during the capture
//	counts              samples (on-CPU), offcpu_intervals, samples_before,
//	                    lost_records, lost_samples, throttled, threads,
//	                    unreadable_threads, jit_sources, jit_truncated,
//	                    missing_symbols
//	settings            freq_hz, baseline_freq_hz, history_ns,
//	                    capture_for_ns, offcpu, kernel, ptrace
//	notes               facts a reader needs to trust the capture
//	files               the files in the directory
//
// Durations are integer nanoseconds (fields ending in _ns).
package report
