// Package model is the capture model: the facts one capture holds, as
// plain values, and nothing else. Collectors make them (package sampler
// and capture the samples, package snapshot the threads, package
// symbolize the locations, package internal/unwind why a stack ends);
// everyone else reads them: the findings, the renderings (package
// report), the capture directory (package capdir), alerts, hooks and
// uploads. It is to stallwatch what google/pprof's profile package is to
// pprof's report, and it imports nothing of stallwatch, so that reading
// a capture never links sampling, ptrace or /proc code.
//
// It holds:
//
//   - the capture's facts (Info, capture.json): its Trigger, counts,
//     settings, the host, findings (Finding: kind, severity, the threads
//     and functions named), notes, and a finished capture's Result;
//   - the thread snapshot: Snapshot, Thread, Syscall, Wait and the
//     waits-for graph (LockGraph, BuildLockGraph), and the typed errors
//     that say why a thread or the process could not be read as asked;
//   - where code lives: Location (one address, its inlined Lines),
//     Mapping, FrameKind, and Cut, why a stack ends early;
//   - samples (Sample, Meta) and the sample types and label names of
//     profile.pb.gz and threads.pb.gz, which Datadog's backend reads.
//
// Its JSON forms are contracts, grown by adding fields, never by changing
// one: capture.json (Info's fields, below) and threads.json
// (WriteSnapshotJSON, ReadSnapshotJSON: every field of a Snapshot, stacks
// as frames with their lines, mappings in a table, each error as its text
// and as a typed record, so that a snapshot read back answers errors.Is
// and errors.As as the one written did). A reader bounds what it reads.
//
// # capture.json
//
// Schema 1; fields are added without a schema change:
//
//	schema              1
//	stallwatch_version  version that wrote it
//	trigger             "stall" | "signal" | "manual" ("continuous" only
//	                    for periods read back merged, never written)
//	reason              why, in words ("no heartbeat for 10.2s")
//	heartbeat           the heartbeat source ("file /run/app.beat")
//	seq                 2 and up for recaptures of a stall that lasts
//	pid, command, executable, kernel (uname -r), hostname
//	host                cpus, load1, load5, load15 (/proc/loadavg),
//	                    running, tasks: the machine's load when written
//	kernel_context      the process's kernel context from the trigger (or
//	                    the recording's start) to the end: start, end,
//	                    duration_ns; cgroups (hierarchy, path); throttling
//	                    of its cgroup ("own") and each parent with a quota
//	                    (path, v2, limited, quota_ns, period_ns, periods,
//	                    throttled_periods, throttled_ns, usage_ns);
//	                    pressure (scope "host" or the v2 cgroup's path,
//	                    resource cpu|memory|io, some and full: stalled_ns,
//	                    share of the window, avg10, avg60); host_cpu (cpus,
//	                    steal, iowait, busy: shares of all CPU time;
//	                    ticks); oom_kills (the host's); reclaim (the host's
//	                    alloc_stalls, scan_direct, steal_direct,
//	                    compact_stalls, swap_ins, major_faults,
//	                    refault_file, refault_anon); disks (name, major,
//	                    minor, busy share, reads, writes, read_bytes,
//	                    write_bytes, wait_ns); memory (its memory cgroup
//	                    and each parent with a limit: path, limit_bytes,
//	                    limited, high_bytes, usage_bytes, under_oom and the
//	                    deltas failcnt, oom_kills, max_events, high_events,
//	                    major_faults, scan_direct, steal_direct); threads
//	                    whose counters moved (tid, major_faults,
//	                    minor_faults, voluntary_switches,
//	                    involuntary_switches); notes
//	kernel_context_before  the same over the flight recorder's history
//	                    before the trigger, without threads
//	start, trigger_at, end   RFC 3339 times: the sampled window (history
//	                    included) and the trigger
//	last_beat           the last heartbeat before the stall
//	recovered           the first heartbeat after it (capdir's Update)
//	stall_ns            heartbeat silence at the trigger
//	stall_length_ns     the whole stall, last beat to recovery (Update)
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
//	                    ("cfi", "fp"), stack_copy_bytes (the copy
//	                    samples start with), stack_copy_max_bytes (the
//	                    ceiling each thread's copies grew to as its
//	                    stacks needed; omitted for a fixed --stack-copy)
//	stack_copy_grown    the threads whose stack copies grew: tid, name,
//	                    bytes; omitted when none did
//	runtime             the language runtime the process runs, as the
//	                    findings recognised it ("jvm", "go", "node",
//	                    "python", "dotnet", "julia", "ruby", "erlang",
//	                    "php", "deno", "bun", "wasmtime"); omitted when
//	                    none
//	continuous_profile  where the target's continuous profile goes, when
//	                    it has one: dir (its period files), period_ns,
//	                    since (the first period's start), uploaded (the
//	                    periods go to the agent too); omitted without
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
package model
