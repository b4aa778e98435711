// Package sampler samples every thread of a running process with
// perf_event_open: on-CPU stacks from the cpu-clock software event, off-CPU
// intervals from context-switch records, each with kernel and user
// callchains and a CLOCK_MONOTONIC time. It attaches to threads as they
// appear and lets go of them as they exit, changes the sampling rate of the
// attached threads without a gap, and keeps the recent past in a bounded
// flight recorder.
//
// The sampler only collects raw samples (addresses, thread, time, weight).
// It knows nothing of heartbeats, symbols or output formats. Where samples
// carry a copy of the user stack (Config.DumpOnCPU, DumpOffCPU), an
// unwinder given as Config.UserStack turns each into its user stack as it
// arrives, so that neither the flight recorder nor a recording holds a
// copy: their memory is that of stacks of addresses.
//
// Config.Annotate adds, as each sample is decoded, the frames of an
// interpreter its stack runs, read from the target then (Sample.Interp:
// handles its caller resolves); Config.PromptWakeup wakes the reader at
// every record so that the read comes within microseconds of the sample.
//
// # Events and rings
//
// Each thread gets three events (pid = tid, cpu = -1; see Descriptors for
// fewer), all with
// use_clockid = CLOCK_MONOTONIC (the clock jitdump writers use) and the
// same sample_id layout, so one decoder reads every record:
//
//   - a tracker (the dummy software event, task=1, comm=1) that brings
//     FORK, EXIT and COMM records into a two-page ring of its own, with a
//     one-byte watermark: every record wakes the reader, so a new thread is
//     attached within milliseconds of its FORK and an exited one releases
//     its descriptors at once. A /proc/<pid>/task scan every 500 ms is the
//     backstop (threads started by a thread not yet attached);
//   - the on-CPU event (cpu-clock, or cycles when asked and present) that
//     owns the thread's sample ring (see Rings, woken a quarter full). It
//     is opened in period mode: cpu-clock's frequency mode is a
//     fixed period inside the kernel anyway (perf_swevent_init_hrtimer),
//     after which PERF_EVENT_IOC_PERIOD takes nanoseconds;
//   - the off-CPU event (context-switches, period 1, context_switch=1),
//     writing into the same ring (PERF_EVENT_IOC_SET_OUTPUT, allowed for
//     events of the same task), opened when off-CPU sampling is first
//     asked for.
//
// # Rings
//
// A ring is sized when its thread is attached, for the peak rate the
// sampler may be asked for (Config.PeakFreq, PeakOffCPU: a flight
// recorder's rings are those of its captures): RingHold (250 ms) of the
// largest records this configuration writes, a sample per period and,
// with off-CPU sampling, AssumedSwitches (1,000) context switches a
// second; at most 16 MiB. That is how late the reader may be, on a
// machine so busy that it waits for a CPU, before the kernel drops
// records: a single-threaded target sampled at 997 Hz with 16 KiB stack
// copies gets 16 MiB (the former 512 KiB held 29 records, and a Python
// spinner lost up to 278 records in 4 s on a loaded machine). All rings
// share 64 MiB, each thread an equal part of it (by the threads at Start,
// or attached since, whichever is more), rounded down; a ring is never
// smaller than two of the largest records, so the bound is 64 MiB or two
// records a thread, whichever is more: 62.5 MiB for 1,000 threads with
// 16 KiB copies (64 KiB each), 437 MiB for 7,000. Stats.RingBytes says
// what they hold now. Ring memory is the kernel's, locked
// (perf_event_mlock_kb, then RLIMIT_MEMLOCK, then CAP_IPC_LOCK), not in
// this process's RSS: where locked memory runs short a ring is made
// smaller, its event opened again so that the wakeup watermark fits it.
// Records that find a ring full are lost and counted from the kernel's
// PERF_RECORD_LOST. Per-CPU rings would need one event per thread and
// CPU.
//
// # Descriptors
//
// Each event is a file descriptor: three per thread (two with the
// tracker folded, one without off-CPU as well), so a 7,000-thread target
// needs 21,000 against RLIMIT_NOFILE. PlanFDs raises the soft limit to
// the hard one and fits the threads in before sampling begins, giving up
// what costs a reader least first: the tracker (Config.FoldTracker: its
// FORK, EXIT and COMM records then come in the on-CPU ring, and new
// threads are found when that ring wakes the reader, at a hang-up, or at
// the /proc scan, within 500 ms), then off-CPU sampling, then threads
// (Config.MaxThreads: the busiest by CPU time from /proc schedstat, the
// main thread always, deterministic and read without stopping anything).
// A thread past the bound is counted (Stats.ThreadsOverBudget), never
// retried, and never fatal; an EMFILE nobody planned for (another part
// of the process took descriptors) lowers the bound to what fitted.
// SetRate that runs out of descriptors while opening off-CPU events
// closes the ones it opened, up to half the headroom, so that the rest
// of a capture can still open its files, and says which threads lack
// what (PartialError).
//
// SetRate changes each thread's events in place (PERF_EVENT_IOC_PERIOD,
// ENABLE, DISABLE), so no thread goes unsampled in between. The kernel
// does not update the PERIOD field of cpu-clock samples after such a
// change; on-CPU weights therefore come from the sampler's own record of
// the period in force at each sample's time.
//
// # Stack copies that grow
//
// With Config.GrowStackCopy each thread's copies start at DumpOnCPU and
// DumpOffCPU and double, up to that ceiling (MaxStackCopy, 60 KiB, at
// most: the largest copy that fits a 64 KiB record beside a whole
// callchain), once the thread's walks run out of them: a walk by
// UserStack that ends unwind.CopyExhausted with the copy as large as
// asked, twice and in at least 1% of its recent samples (grow.go). A copy
// the kernel cut short (a page not resident, the stack's end) does not
// count: a larger one would be cut the same. sample_stack_user is fixed
// when an event is opened, so the thread's sampling events are opened
// again with the larger copy on a new ring (sized by the same policy for
// the larger records), enabled before the old ones are disabled; a
// cut-over time taken between the two splits the overlap, each record
// kept from exactly one ring (the old one's before it, the new one's
// from it); the old ring is read to its end, and its descriptors and
// mapping go to the closer. For a second after a thread is attached the
// reader drains every 20 ms, so that its first samples decide, not a
// quarter ring of them. Copies never shrink: what made a thread's
// stacks deep comes back, and each regrowth costs the walks that ran out
// before it. ThreadInfo.StackCopy says what each thread copies, Stats
// how many regrowths were made and failed (a regrowth that cannot open
// its events or map its ring keeps the old ones, and is not tried again
// for that thread). Ring memory: 1,000 threads grown to 60 KiB hold
// 128 KiB each, 125 MiB, against 62.5 MiB at 16 KiB (BenchmarkRingBound).
//
// # Off-CPU intervals
//
// The context-switches sample at switch-out carries the stack (kernel and
// user callchain, user registers and the top DumpOffCPU bytes of the user
// stack); the PERF_RECORD_SWITCH out record says whether the thread was
// preempted; the switch-in record ends the interval, which is weighted by
// its length in nanoseconds. A thread already blocked when observation
// begins (at attach, or when SetRate turns off-CPU sampling on) opens an
// interval at that moment with its stack from /proc (kernel frames by name
// through kallsyms, the user PC and stack pointer from the syscall file, the
// user stack from Config.BlockedStack, the stack's top read with
// process_vm_readv; the thread is never stopped). Intervals still open
// when a Recording stops or History is read are closed there.
//
// # Reading
//
// One goroutine waits for the rings in Go's poller (a blocking epoll_wait
// keeps the runtime's sysmon polling), drains every ring on each wakeup,
// and hands samples to the flight recorder (bounded by age and bytes,
// evicted by whole chunks, exact by age for readers) and to the running
// Recordings. Closing the events of an exited thread can wait for an RCU
// grace period, so a separate goroutine does it. Every read (History,
// Stop, Stats, Threads, OffCPUSince) drains the rings first.
//
// Recording.Cut ends a recording at a moment and begins the next one
// there in one step, under the lock that hands samples out: each sample
// is in exactly one of the two (an off-CPU interval across the moment is
// split at it), so that recordings cut one after another are the
// contiguous periods of continuous profiling.
//
// Input from the ring is checked like any other untrusted input: sizes are
// bounded by the record that holds them, and a ring that does not hold
// records is counted (Stats.BadRecords) and skipped to its head.
package sampler
