package capture

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/stallwatch/stallwatch/sampler"
)

// Config says how to capture one target. Its zero value (with a PID)
// means the documented defaults: every field is either a value whose zero
// means its default, or a switch that turns something off.
type Config struct {
	PID int
	// Out is the directory capture directories are written under
	// (DefaultOut).
	Out string
	// Freq is the on-CPU sampling rate of a capture, per thread
	// (DefaultFreq).
	Freq int
	// BaselineFreq is the rate of the flight recorder between captures
	// (DefaultBaselineFreq).
	BaselineFreq int
	// NoFlightRecorder turns the flight recorder off (`--baseline-freq
	// 0`): nothing samples the target until a capture starts, and a
	// capture has no history.
	NoFlightRecorder bool
	// CaptureFor is how long a capture samples at Freq
	// (DefaultCaptureFor).
	CaptureFor time.Duration
	// History is how much of the flight recorder goes into a capture as
	// phase=before (DefaultHistory).
	History time.Duration
	// NoOffCPU, NoKernel and NoPtrace turn off off-CPU sampling, kernel
	// frames, and ptrace stops for the snapshot's user stacks
	// (--no-offcpu, --no-kernel, --no-ptrace).
	NoOffCPU, NoKernel, NoPtrace bool
	// Snapshot takes a thread snapshot with each capture (the watchdog
	// always does; `record` only with --snapshot).
	Snapshot bool
	// Unwind is how the user stacks of samples are walked (--unwind):
	// UnwindAuto (""), UnwindCFI or UnwindFP.
	Unwind UnwindMode
	// StackCopy is how many bytes of the user stack each sample copies
	// for CFI unwinding (--stack-copy): a fixed size. 0, the default:
	// each thread's copies start at DefaultStackCopy and double, up to
	// MaxStackCopy, once its stacks are seen to need more (package
	// sampler, Config.GrowStackCopy).
	StackCopy int
	// NativeOnly leaves samples' stacks as they were unwound: no
	// interpreter frames read from the target's memory in place of its
	// evaluation frames (CPython), no wakeup per record. For comparisons
	// with profilers that see native frames only (perf).
	NativeOnly bool
	// Keep is how many capture directories to keep under Out (0: all).
	Keep int
	// Uploads, when set, is the queue of the captures' uploads: Keep
	// spares a capture whose upload it still holds, until the upload is
	// done or the queue drops it for a bound (and says so).
	Uploads PendingUploads
	// Profile profiles the target continuously: the sampler runs at
	// ProfileFreq between captures (or BaselineFreq, when higher), and
	// Session.Period cuts what it samples into contiguous periods.
	// ProfileOffCPU adds off-CPU intervals to the periods (each context
	// switch then costs a sample).
	Profile       bool
	ProfileFreq   int
	ProfileOffCPU bool
	// Heartbeat names what is watched, for the report ("file /run/app.beat").
	Heartbeat string
	Logger    *slog.Logger
}

// PendingUploads says whether a capture directory (its absolute path)
// has an upload still queued; *spool.Spool is one.
type PendingUploads interface {
	Pending(dir string) bool
}

// Defaults, as docs/commands.md and every command's --help state them.
const (
	DefaultFreq         = 997
	DefaultBaselineFreq = 49
	DefaultCaptureFor   = 10 * time.Second
	DefaultHistory      = 30 * time.Second
	DefaultOut          = "./stallwatch-captures"
	// DefaultProfileFreq is continuous profiling's rate: see
	// docs/testing.md's benchmarks for the measurement that chose it.
	DefaultProfileFreq = 97
)

// UnwindMode says how the user stacks of samples are walked.
type UnwindMode string

const (
	// UnwindAuto is UnwindCFI, but for a target whose code all keeps
	// frame pointers (a Go program without C code), where UnwindFP gives
	// whole stacks as often and costs less (BenchmarkGoUnwindModes).
	UnwindAuto UnwindMode = "auto"
	// UnwindCFI copies StackCopy bytes of the user stack with every
	// sample and unwinds them with call frame information (.eh_frame,
	// .debug_frame, a Go binary's pclntab, JIT unwinding info), as perf
	// --call-graph dwarf does; frame pointers only where nothing better
	// exists.
	UnwindCFI UnwindMode = "cfi"
	// UnwindFP takes the kernel's frame-pointer callchains, each return
	// address checked against its call site, with the top
	// FramePointerCopy bytes of the stack for the caller of a function
	// that has not set up its frame pointer: the cheapest sampling, whole
	// stacks only in code built with frame pointers.
	UnwindFP UnwindMode = "fp"
)

// UnwindModes are the values --unwind takes.
var UnwindModes = []string{string(UnwindAuto), string(UnwindCFI), string(UnwindFP)}

// DefaultStackCopy is the stack copied per sample for CFI unwinding at
// first, when no size is given (Config.StackCopy): see docs/testing.md's
// benchmarks for the measurement that chose it. A thread whose stacks
// need more has its copies grow, up to MaxStackCopy.
const DefaultStackCopy = 16 << 10

// FramePointerCopy is the stack copied per sample under UnwindFP: the top
// of the stack, where a function that has not set up its frame pointer
// (a frameless leaf such as Go's system call stubs, any function in its
// prologue) keeps its return address, which the kernel's frame-pointer
// chain skips.
const FramePointerCopy = 256

// MaxStackCopy is the largest stack copy the kernel can put in a sample
// beside a whole callchain, and the ceiling of the copies that grow.
const MaxStackCopy = sampler.MaxStackCopy

// stackCopy is the stack copy samples start with, and the ceiling they
// grow to (0: a fixed size).
func (c *Config) stackCopy() (start, ceiling int) {
	if c.StackCopy > 0 {
		return c.StackCopy, 0
	}
	return DefaultStackCopy, MaxStackCopy
}

// period is the CPU time a sample at Freq stands for, in nanoseconds (0
// without a rate).
func (c *Config) period() int64 {
	if c.Freq > 0 {
		return int64(time.Second) / int64(c.Freq)
	}
	return 0
}

// fill applies the defaults; afterwards BaselineFreq is 0 exactly when
// the flight recorder is off.
func (c *Config) fill() error {
	if c.PID <= 0 {
		return errors.New("capture: no target pid")
	}
	switch c.Unwind {
	case "":
		c.Unwind = UnwindAuto
	case UnwindAuto, UnwindCFI, UnwindFP:
	default:
		return fmt.Errorf("capture: unwind mode %q is not one of %v", c.Unwind, UnwindModes)
	}
	if c.StackCopy < 0 || c.StackCopy > MaxStackCopy {
		return fmt.Errorf("capture: stack copy of %d bytes: at most %d", c.StackCopy, MaxStackCopy)
	}
	if c.Freq < 0 || c.BaselineFreq < 0 || c.ProfileFreq < 0 {
		return fmt.Errorf("capture: negative sampling rate (%d, %d, %d)", c.Freq, c.BaselineFreq, c.ProfileFreq)
	}
	if c.ProfileFreq == 0 {
		c.ProfileFreq = DefaultProfileFreq
	}
	if c.Freq == 0 {
		c.Freq = DefaultFreq
	}
	switch {
	case c.NoFlightRecorder:
		c.BaselineFreq = 0
	case c.BaselineFreq == 0:
		c.BaselineFreq = DefaultBaselineFreq
	}
	if c.CaptureFor <= 0 {
		c.CaptureFor = DefaultCaptureFor
	}
	if c.History <= 0 {
		c.History = DefaultHistory
	}
	if c.Out == "" {
		c.Out = DefaultOut
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// restRate is the sampler's rate between captures: the flight
// recorder's, or continuous profiling's when higher; and whether it
// samples off-CPU then (continuous profiling with ProfileOffCPU).
func (c *Config) restRate() (freq int, offCPU bool) {
	if !c.Profile {
		return c.BaselineFreq, false
	}
	return max(c.BaselineFreq, c.ProfileFreq), c.ProfileOffCPU && !c.NoOffCPU
}

// descriptorsWanted is about how many file descriptors sampling every
// thread of a capture with these settings takes: the events of each
// thread the sampler saw, and the plan's headroom.
func (c *Config) descriptorsWanted(st sampler.Stats) int {
	per := 2
	if !c.NoOffCPU {
		per = 3
	}
	return (st.ThreadsAttached+st.ThreadsFailed+st.ThreadsOverBudget)*per + sampler.DefaultFDHeadroom
}
