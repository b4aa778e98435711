// Package capdir owns the capture directory: what capture.json says (Info),
// how a capture directory is written, read back, updated and pruned, and
// the small types a capturer and its caller share (Trigger, Result).
//
// It is the data model beside the renderings, as google/pprof's profile
// package is beside its report: it knows file names and capture.json, not
// how a profile or a report is made. It imports no sampling, symbol or
// pprof code, so that the watchdog, alerts and hooks can use a capture's
// facts without dragging those in; the capture package fills it, the
// report package renders it.
//
// # Writing
//
// OpenRoot opens the directory captures go under (--out) once, creating
// it, and refuses one another user can write (internal/safedir). Root.Write
// writes OUT/<UTC time>-<pid>-<trigger>/ (for example
// 20260105T143012.345Z-4242-stall) into a hidden directory first and
// renames it into place with RENAME_NOREPLACE, so a reader never sees it
// half written and two captures never share one; each file is synced
// before. Everything is written relative to directory descriptors, never
// through a path. The files are the caller's (File: a name and a writer);
// capture.json is written last. Root.Update rewrites capture.json (and the
// files the caller renders again) atomically; Root.Prune keeps the newest
// captures. NewInfo begins every capture.json, so that every writer says
// the same things the same way.
//
// # Reading
//
// Open reads a capture directory's capture.json; Dir.Open and Dir.ReadFile
// open its other files (regular files only, sizes checked before reading).
//
// # capture.json
//
// Schema 1; fields are added without a schema change:
//
//	schema              1
//	stallwatch_version  version that wrote it
//	trigger             "stall" | "signal" | "manual"
//	reason              why, in words ("no heartbeat for 10.2s")
//	heartbeat           the heartbeat source ("file /run/app.beat")
//	seq                 2 and up for recaptures of a stall that lasts
//	pid, command, executable, kernel (uname -r), hostname
//	host                cpus, load1, load5, load15 (/proc/loadavg),
//	                    running, tasks: the machine's load when written
//	start, trigger_at, end   RFC 3339 times: the sampled window (history
//	                    included) and the trigger
//	last_beat           the last heartbeat before the stall
//	recovered           the first heartbeat after it (Root.Update)
//	stall_ns            heartbeat silence at the trigger
//	stall_length_ns     the whole stall, last beat to recovery (Root.Update)
//	cut_short, cut_short_why   the capture ended early, and why
//	target_exited       the process exited during the capture
//	counts              samples (on-CPU), offcpu_intervals, samples_before,
//	                    lost_records, lost_samples, throttled, threads,
//	                    unreadable_threads, unsampled_threads (left
//	                    out of sampling for want of file descriptors;
//	                    omitted when 0), jit_sources, jit_truncated,
//	                    missing_symbols
//	settings            freq_hz, baseline_freq_hz, history_ns,
//	                    capture_for_ns, offcpu, kernel, ptrace, unwind
//	                    ("cfi", "fp"), stack_copy_bytes
//	findings            what the report concludes, the most likely cause
//	                    first: kind ("stopped", "deadlock",
//	                    "runtime_pause", "event_loop_blocked",
//	                    "gil_contention", "lock_convoy",
//	                    "uninterruptible", "cpu_starvation", "spinning",
//	                    "hot_thread", "missing_jit_symbols",
//	                    "all_waiting"; readers accept new kinds),
//	                    severity ("critical", "warning", "info"), summary
//	                    (one line), detail (the numbers behind it and what
//	                    to do), tids (the threads it names), functions
//	                    (the functions it names), runtime ("jvm", "go",
//	                    "node", "python", "dotnet", "julia", for runtime
//	                    findings)
//	notes               facts a reader needs to trust the capture
//	files               the files in the directory
//
// Durations are integer nanoseconds (fields ending in _ns).
package capdir
