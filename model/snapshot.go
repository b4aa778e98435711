package model

import (
	"strconv"
	"time"
)

// Snapshot is every thread of one process at one moment.
type Snapshot struct {
	PID     int
	Command []string
	// Time is when the snapshot began; Mono is the same moment on
	// CLOCK_MONOTONIC (the clock of samples and jitdump records).
	Time     time.Time
	Mono     uint64
	Duration time.Duration // how long taking it took

	Threads []Thread
	Locks   LockGraph

	// PtraceUsed says whether user stacks were read under ptrace stops;
	// when stops were wanted but refused for the whole process, PtraceErr
	// says why: a *perms.Error (CAP_SYS_PTRACE missing: the user can fix
	// it), ErrKernelThread, ErrOwnProcess, or a *RefusedError (refused
	// although permitted). Threads refused one by one say so in their Err.
	PtraceUsed bool
	PtraceErr  error
	// MaxStop is the longest time any one thread was kept stopped.
	MaxStop time.Duration
	// TargetExited is set when the process exited while it was read.
	TargetExited bool
	// Notes are facts a reader needs to trust the snapshot: what could
	// not be known and why.
	Notes []string
}

// ByTID indexes the snapshot's threads by tid.
func (s *Snapshot) ByTID() map[int]*Thread {
	ix := make(map[int]*Thread, len(s.Threads))
	for i := range s.Threads {
		ix[s.Threads[i].TID] = &s.Threads[i]
	}
	return ix
}

// Thread is one thread as the snapshot found it.
type Thread struct {
	TID   int
	Name  string
	State byte   // 'R', 'S', 'D', 'T', 't', 'Z', 'X', 'I' as in /proc
	Wchan string // kernel function it sleeps in, "" if running
	// TracerPID is the process tracing the thread (a debugger), read
	// before the snapshot's own stop; Tracer is its name. 0: none.
	TracerPID int
	Tracer    string

	// Syscall is the system call the thread is in, nil when it runs in
	// user space or is not in a system call.
	Syscall *Syscall

	VoluntarySwitches   uint64
	InvoluntarySwitches uint64
	// RunTime and RunqueueWait are totals since the thread started
	// (schedstat): time on a CPU, and time runnable but waiting for one.
	RunTime      time.Duration
	RunqueueWait time.Duration
	// OffCPUFor is how long the thread has been off the CPU now, when
	// OffCPUKnown; OffCPUSource says how it was learnt ("sched",
	// "sampler", "at least, since ...").
	OffCPUFor    time.Duration
	OffCPUKnown  bool
	OffCPUSource string

	// Kernel and User are the stacks, innermost first, resolved.
	Kernel []*Location
	User   []*Location
	// UserAddrs are the raw user addresses User was resolved from: the
	// first is the thread's instruction pointer, the others return
	// addresses except where UserExact says otherwise.
	UserAddrs []uint64
	// UserExact[i] marks UserAddrs[i] as the address of an instruction
	// about to run rather than a return address (the first frame, a
	// signal trampoline, the instruction a signal interrupted).
	UserExact []bool
	// Unwinder names the method that produced User ("fp", "cfi+fp", "pc only").
	Unwinder string
	// UserCut says why the user stack ends before the thread's first
	// function (User then ends with a pseudo-frame saying it); zero when
	// it does not.
	UserCut Cut

	// Stopped says the thread was stopped with ptrace; Stop is for how
	// long at most (from PTRACE_INTERRUPT to PTRACE_DETACH, which
	// includes the time the thread took to get to the stop), StopHeld at
	// least (from when the stop was seen).
	Stopped  bool
	Stop     time.Duration
	StopHeld time.Duration

	// Wait is what the thread waits for, when that is known.
	Wait *Wait
	// Err says what could not be read for this thread (errors.Join of
	// each): ErrExited, ErrRunning (no user stack without a stop), a
	// *TracedError (another tracer holds it: read without a stop), a
	// *ReadError naming the /proc file, or the unwinder's error.
	Err error
}

// Syscall is a system call in progress.
type Syscall struct {
	Nr   int
	Name string // "futex", "read", ...
	Args [6]uint64
	// Desc is a readable form: "read(fd 5 → pipe:[1234])".
	Desc string
}

// Wait is what a blocked thread waits for.
type Wait struct {
	Kind string // "mutex", "futex", "fd", "sleep", "child", ...
	Addr uint64 // the futex word, for futex waits
	// Owner is the thread id holding what is waited for; 0 when unknown.
	Owner int
	// Desc says it in words: "pthread mutex 0x7f..10 held by tid 12",
	// "read() on fd 5 → socket:[8812]", "owner unknown".
	Desc string
	// OwnerSite is where the owner took what is waited for, when known:
	// the frame of a Java thread holding a monitor
	// ("Ledger.settleChecking (Stall.java:38)").
	OwnerSite string
}

// LockGraph is the waits-for graph between the threads.
type LockGraph struct {
	Edges []Edge
	// Cycles are deadlocks: each a list of tids, each waiting for the next
	// and the last for the first.
	Cycles [][]int
	// Chains are maximal paths that end at a thread not waiting for
	// another thread (blocked elsewhere, or running), longest first.
	Chains [][]int
}

// Edge says From waits for To.
type Edge struct {
	From, To int
	Via      string // "pthread mutex 0x7f..10"
}

// StateName spells a /proc state letter the way /proc/<pid>/status does.
func StateName(s byte) string {
	switch s {
	case 'R':
		return "R (running)"
	case 'S':
		return "S (sleeping)"
	case 'D':
		return "D (disk sleep)"
	case 'T':
		return "T (stopped)"
	case 't':
		return "t (tracing stop)"
	case 'Z':
		return "Z (zombie)"
	case 'X':
		return "X (dead)"
	case 'I':
		return "I (idle)"
	case 'P':
		return "P (parked)"
	case 0:
		return "? (unknown)"
	}
	return strconv.QuoteRune(rune(s))
}
