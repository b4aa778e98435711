// Package jit reads the symbol files that just-in-time compilers publish for
// profilers — the perf jitdump (jit-<pid>.dump) and the older perf map
// (/tmp/perf-<pid>.map) — and answers "which JIT code was at this address
// at this time".
//
// It owns five things:
//
//   - parsers for both formats, which follow a file while its writer still
//     appends to it (a half-written last record is left for the next read),
//     and Inspect, which says what a file holds and what is wrong with it;
//   - discovery of a live process's files (its jitdump mapping, the usual
//     directories, its perf map), opened through /proc/<pid>/root and
//     trusted only when the target's user or root owns them;
//   - a time-aware address index: JITs free code and load new code at the
//     same address, so a sample is resolved against the code that was live
//     at the sample's CLOCK_MONOTONIC time (LookupAt), or the latest (Lookup);
//     where several sources know the address (the GDB JIT interface's
//     objects, jitdumps, perf maps, which have no times), the code loaded
//     last before the sample's time answers, the interface's first on a
//     tie (its objects are where the code is now); how long an answer
//     holds: LookupSpan's span of sample times, and, from one Index to
//     the next of a Process, everywhere but the address ranges code was
//     loaded, moved or freed over in between (Index.ChangedSince: a
//     jitdump's CODE_LOAD or CODE_MOVE, a perf map's new line, the GDB
//     JIT interface's list gaining or losing an object), so that a cache
//     of answers keeps what no new code touched;
//   - the names people read: DisplayName turns a runtime's raw name
//     ("JS:*fibonacci /app/fib.js:1:1", "julia_fibonacci_1234",
//     "long Hot.fibonacci(long)") into a function name plus file and line,
//     in the syntax package runtimes describes for each runtime's JIT,
//     and Index.LineAt gives the line of any address from the jitdump's
//     line table (Options.LineTables);
//   - a perf map writer (MapFile) that hands a jitdump's names to tools
//     that read only perf maps;
//   - the unwinding info a runtime publishes for each piece of code
//     (CODE_UNWINDING_INFO: .eh_frame and .eh_frame_hdr), kept with it,
//     moved with it, replaced with it (Index.Unwinding).
//
// Typical use, at capture time:
//
//	p, err := jit.OpenProcess(pid, jit.Options{})
//	...
//	p.Update() // read what the runtime appended since
//	ix := p.Index()
//	sym, ok := ix.LookupAt(sample.Addr, sample.Time)
//
// Everything in these files comes from the target and is untrusted: reads
// are bounded by what the file holds, a size field never drives an
// allocation, code bytes are skipped rather than kept, and every defect is
// reported with the file, the offset and the reason, never a panic.
//
// # Memory
//
// A runtime appends to its jitdump for as long as it runs, and a hostile
// one may write millions of tiny records, so an Index is bounded whatever
// the files say: at most MaxSymbols code ranges (replaced code included),
// MaxNameBytes of names and MaxLineEntries line-table entries, and no name
// longer than 4 KiB. Past the bound the index is compacted: it keeps the
// code live now and forgets the code that later code replaced (a lookup at
// a time before the compaction then finds the code live at it); if the
// live code alone passes three quarters of the bound, the oldest of it is
// dropped. SourceInfo.Forgotten and Dropped count both, per file.
//
// A process followed for days (continuous profiling) is not left to
// reach the bound: Process.Forget(horizon) says that no lookup will be
// made at a time before horizon, and the code that later code replaced
// before it is retired (SourceInfo.Retired, not a loss: nothing can ask
// for it), once that frees a quarter of the index or 4,096 symbols. The
// index then holds the code live now and what was replaced since the
// horizon, however long the runtime keeps recompiling; at the bound, that
// replaced code is kept before any other when it fits. Inspect
// keeps to half the bound (it needs only the live code, to count code
// loaded over code) and counts everything else as the records stream by.
//
// Measured with the worst file (165 MB of one-byte CODE_LOADs; `make
// bench`, BenchmarkWorstInputs): `jit inspect` peaks at 130 MB of RSS
// (2.1 GB before the bound), and an idle `watch` of its writer holds 85 MB
// (300 MB at its peak, while reading; 760 MB and 860 MB before).
//
// The package does not sample and does not know about perf events; it only
// needs timestamps on the clock the writers use (CLOCK_MONOTONIC), which is
// the clock stallwatch's sampler stamps samples with.
package jit
