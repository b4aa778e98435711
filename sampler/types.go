package sampler

import "github.com/stallwatch/stallwatch/internal/unwind"

// Kind says what a sample measures.
type Kind uint8

const (
	// OnCPU is a cpu-clock sample: the thread was running.
	OnCPU Kind = iota
	// OffCPU is an interval the thread spent off the CPU.
	OffCPU
)

func (k Kind) String() string {
	if k == OffCPU {
		return "off-cpu"
	}
	return "on-cpu"
}

// Sample is one raw sample.
type Sample struct {
	// Time is CLOCK_MONOTONIC in nanoseconds: when an on-CPU sample was
	// taken, or when an off-CPU interval began (the thread left the CPU).
	Time uint64
	// Weight is in nanoseconds: the CPU time an on-CPU sample stands for
	// (its period), or the length of an off-CPU interval.
	Weight uint64
	PID    int32
	TID    int32
	CPU    int32
	Kind   Kind
	// Preempted marks an off-CPU interval that began with preemption: the
	// thread stayed runnable and waited for a CPU rather than blocking.
	Preempted bool
	// Stack holds code addresses, innermost first. The first Kernel
	// entries are kernel addresses, the rest user addresses. Return
	// addresses are as the unwinder found them (not adjusted by -1).
	Stack  []uint64
	Kernel uint16
	// Cut says why the user stack ends before the thread's first
	// function (Config.UserStack); zero when it does not, or when no
	// unwinder said.
	Cut unwind.Cut
	// Interp are the frames of an interpreter the stack ran at the
	// sample, innermost first: handles Config.Annotate returned.
	Interp []uint64

	// Regs and StackDump, when StackDump is not empty, are the user
	// registers and the top of the user stack (from Regs.SP up) at the
	// sample, kept only without a Config.UserStack to reduce them as they
	// arrive.
	Regs      UserRegs
	StackDump []byte
}

// UserRegs are the user-space registers an unwinder starts from (x86-64:
// rip, rsp, rbp).
type UserRegs struct {
	IP, SP, BP uint64
}

// End is when an off-CPU interval ended (Time for on-CPU samples).
func (s *Sample) End() uint64 {
	if s.Kind == OffCPU {
		return s.Time + s.Weight
	}
	return s.Time
}
