package sampler

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/unwind"
)

// Config says what to sample. The zero value of each optional field means
// its default.
type Config struct {
	PID int
	// Freq is on-CPU samples per second of each thread's CPU time
	// (cpu-clock); 0 samples nothing on-CPU.
	Freq int
	// OffCPU records off-CPU intervals from context switches.
	OffCPU bool
	// Kernel puts kernel frames in callchains (needs
	// kernel.perf_event_paranoid <= 1 or CAP_PERFMON). Without it, time
	// the thread spends in the kernel is not sampled on-CPU.
	Kernel bool
	// Hardware asks for the cycles event instead of cpu-clock. Machines
	// without a PMU (most VMs) fall back to cpu-clock; Stats.Event says
	// which one runs.
	Hardware bool
	// MaxStack bounds callchains (default 127, at most
	// kernel.perf_event_max_stack).
	MaxStack int
	// DumpOffCPU and DumpOnCPU are how many bytes of the user stack (from
	// its pointer up) and which user registers go with each sample
	// (PERF_SAMPLE_STACK_USER and REGS_USER), for an unwinder that reads
	// call frame information: the kernel's callchain walks frame
	// pointers and loses frames in code built without them (Debian's
	// libc). 0 means the default (off-CPU 2048, on-CPU none), negative
	// none. Rounded up to 8 bytes, at most MaxStackCopy.
	DumpOffCPU, DumpOnCPU int
	// GrowStackCopy, when larger than the copies above, is the largest
	// they grow to, per thread, when the thread's walks run out of them
	// (a walk by UserStack that ends unwind.CopyExhausted with the copy
	// as large as asked, in 1% of its samples or more): its events are
	// opened again with copies twice as large, on a ring sized for them,
	// without a gap (ThreadInfo.StackCopy says what each thread copies).
	// They never shrink. 0 (or without UserStack): the copies keep their
	// size. Rounded up to 8 bytes, at most MaxStackCopy.
	GrowStackCopy int
	// UserStack, when not nil, turns each sample's user registers, stack
	// copy and frame-pointer chain into its user stack as the sample
	// arrives (Sample.Stack, Sample.Cut): no copy is kept, so the flight
	// recorder and recordings hold stacks of addresses only. Without it
	// the copies are kept in Sample.StackDump (within HistoryBytes and
	// RecordingBytes).
	UserStack UserStack
	// Annotate, when not nil, is asked as each sample is decoded (an
	// on-CPU sample, the switch-out of an off-CPU interval, a thread
	// found blocked) for the frames of an interpreter that the sample's
	// user stack (innermost first, as unwound) runs, read from the target
	// at that moment: opaque handles, innermost first, that its caller
	// resolves (Sample.Interp). It runs on the reader's goroutine and
	// must be quick.
	Annotate Annotate
	// PromptWakeup wakes the reader at every record rather than when a
	// quarter of a ring is full, so that Annotate reads the target within
	// microseconds of each sample rather than milliseconds: a wakeup per
	// record.
	PromptWakeup bool
	// History bounds the flight recorder by age (default 30s; negative:
	// no flight recorder). HistoryBytes bounds it by memory (default 64
	// MiB).
	History      time.Duration
	HistoryBytes int64
	// RecordingBytes bounds the memory of one Recording (default 1 GiB);
	// samples past it are dropped and counted (Stats.RecordingDropped).
	RecordingBytes int64
	// RingBytes is the size of the data area of each thread's ring
	// buffer, a power of two of pages. By default each ring holds
	// RingHold of records at the peak rate (PeakFreq's samples, and with
	// off-CPU sampling AssumedSwitches context switches a second, each
	// the largest record this configuration writes), at least two such
	// records and at most 16 MiB; all rings together stay within 64 MiB
	// unless the threads are so many that two records each pass it (a
	// thousand threads with 16 KiB stack copies: 64 KiB each, 62.5 MiB).
	// Records that find their ring full are lost and counted.
	RingBytes int
	// PeakFreq and PeakOffCPU are the highest on-CPU rate SetRate will
	// ask for and whether it may turn off-CPU sampling on: rings are
	// made when a thread is attached and sized for them (default Freq
	// and OffCPU). A flight recorder at 49 Hz whose captures sample at
	// 997 Hz has rings for 997 Hz.
	PeakFreq   int
	PeakOffCPU bool
	// BlockedStack returns the user stack of a thread that is blocked when
	// observation begins, without stopping it, and why it ends. nil: the
	// PC from /proc/<pid>/task/<tid>/syscall.
	BlockedStack func(tid int) ([]uint64, unwind.Cut, error)
	// MaxThreads bounds the threads with open events (0: no bound), so
	// that a capture never runs out of file descriptors (PlanFDs gives
	// it). When a target has more at Start, the busiest by CPU time are
	// sampled, the main thread always; the others, and threads started
	// while the bound is reached, are counted (Stats.ThreadsOverBudget)
	// and never sampled.
	MaxThreads int
	// FoldTracker opens no tracker event: FORK, EXIT and COMM records
	// come in the on-CPU event's ring, one descriptor less per thread.
	// New threads are then attached when that ring wakes the reader or
	// at the /proc scan (500 ms), and not while on-CPU sampling is off.
	FoldTracker bool
	Logger      *slog.Logger
}

const (
	defaultMaxStack       = 127
	defaultDumpOffCPU     = 2048
	maxDump               = MaxStackCopy
	defaultHistory        = 30 * time.Second
	defaultHistoryBytes   = 64 << 20
	defaultRecordingBytes = 1 << 30
	defaultRingBytes      = 256 << 10
	ringBudget            = 64 << 20 // all rings together, when RingBytes is not set
	maxRingBytes          = 16 << 20 // one thread's ring, when RingBytes is not set
	minRingBytes          = 16 << 10
)

// RingHold is how long a thread's ring holds its records at the peak rate
// (Config.RingBytes): how late the reader may be, when the machine is so
// busy that it waits for a CPU, before the kernel drops records.
// AssumedSwitches is the context switches a second a ring is sized for
// with off-CPU sampling; a thread that switches more often than that
// while the reader is late loses records (counted).
const (
	RingHold        = 250 * time.Millisecond
	AssumedSwitches = 1000
)

// MaxStackCopy is the largest stack copy a sample can carry: a perf record
// is at most 64 KiB (its size is 16 bits) with its header, callchain and
// registers. The kernel takes a sample_stack_user up to 65,528 bytes when
// an event is opened, but cuts each record's copy to what fits beside its
// callchain; 60 KiB leaves room for a whole callchain (MaxStack 127
// entries and more) so that the size asked is the size copied.
const MaxStackCopy = 60 << 10

// Annotate returns the interpreter frames a sample of thread tid at
// CLOCK_MONOTONIC time t runs, given its user stack; nil for none. See
// Config.Annotate.
type Annotate func(tid int32, t uint64, user []uint64) []uint64

// UserStack unwinds the user stack of a sample, appending it to dst. See
// Config.UserStack.
type UserStack func(smp UserSample, dst []uint64) ([]uint64, unwind.Cut)

// UserSample is what a sample of thread TID at CLOCK_MONOTONIC time Time
// gives to unwind its user stack.
type UserSample struct {
	TID  int32
	Time uint64
	Regs UserRegs
	// Stack is the copy of the user stack from Regs.SP (nil when the
	// sample has none); Asked is the size of the copy the kernel set out
	// to make: it copies less where the stack's next page is not resident
	// or the stack's mapping ends (the record's dyn_size says how much).
	Stack []byte
	Asked int
	// FP is the kernel's frame-pointer chain: the sampled IP, then the
	// return addresses it found.
	FP []uint64
}

// check validates cfg and fills its defaults.
func (cfg *Config) check() error {
	if cfg.PID <= 0 {
		return fmt.Errorf("sampler: pid %d is not a process id", cfg.PID)
	}
	if err := checkFreq(cfg.Freq); err != nil {
		return err
	}
	if cfg.MaxStack <= 0 {
		cfg.MaxStack = defaultMaxStack
	}
	if limit, err := procfs.Sysctl("kernel.perf_event_max_stack"); err == nil && cfg.MaxStack > limit {
		cfg.MaxStack = limit
	}
	if cfg.History == 0 {
		cfg.History = defaultHistory
	}
	if cfg.HistoryBytes <= 0 {
		cfg.HistoryBytes = defaultHistoryBytes
	}
	if cfg.RecordingBytes <= 0 {
		cfg.RecordingBytes = defaultRecordingBytes
	}
	if cfg.MaxThreads < 0 {
		return fmt.Errorf("sampler: MaxThreads %d is negative", cfg.MaxThreads)
	}
	if cfg.RingBytes < 0 {
		return fmt.Errorf("sampler: RingBytes %d is negative", cfg.RingBytes)
	}
	if err := checkFreq(cfg.PeakFreq); err != nil {
		return err
	}
	cfg.PeakFreq = max(cfg.PeakFreq, cfg.Freq)
	cfg.PeakOffCPU = cfg.PeakOffCPU || cfg.OffCPU
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func checkFreq(freq int) error {
	if freq < 0 {
		return fmt.Errorf("sampler: frequency %d Hz is negative", freq)
	}
	if limit, bySysctl := FreqLimit(); freq > limit {
		return &FreqError{Freq: freq, Limit: limit, BySysctl: bySysctl}
	}
	return nil
}

// dumpSize turns a configured dump size into the one asked of the kernel.
func dumpSize(v, def int) int {
	switch {
	case userRegsMask == 0 || v < 0:
		return 0
	case v == 0:
		v = def
	}
	v = (v + 7) &^ 7
	return min(v, maxDump)
}
