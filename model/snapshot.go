package model

import (
	"fmt"
	"strconv"
	"strings"
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
	// "read() on fd 5 → pipe:[4411] read by pid 812 (logger), which is
	// stopped", "owner unknown".
	Desc string
	// OwnerSite is where the owner took what is waited for, when known:
	// the frame of a Java thread holding a monitor
	// ("Ledger.settleChecking (Stall.java:38)").
	OwnerSite string
	// On is what the descriptor waited on is connected to, for a wait
	// in a system call on one descriptor (package internal/fdtarget);
	// nil otherwise.
	On *WaitTarget
}

// WaitTarget is what a descriptor is connected to, and who is at its
// other end.
type WaitTarget struct {
	FD int `json:"fd"`
	// Kind is "file", "directory", "device", "fifo", "pipe", "socket",
	// "epoll", "eventfd", "signalfd", "timerfd", "inotify", "pidfd" or
	// "other".
	Kind string `json:"kind"`
	// Desc says it on one line, names escaped: "TCP 10.0.0.5:5432
	// (ESTABLISHED, 0 bytes queued; from 10.0.0.7:40122) — pid 812
	// (postgres), sleeping".
	Desc string `json:"desc"`
	// Path is a file's, FIFO's or device's path as the process sees it;
	// Device the block device it lives on and DevMajor, DevMinor its
	// number.
	Path     string `json:"path,omitempty"`
	Device   string `json:"device,omitempty"`
	DevMajor uint32 `json:"dev_major,omitempty"`
	DevMinor uint32 `json:"dev_minor,omitempty"`
	// Proto is a socket's protocol ("TCP", "UDPv6", "UNIX-STREAM"),
	// Local and Remote an inet socket's addresses ("10.0.0.5:5432"),
	// Name and PeerName a UNIX socket's and its peer's bound names,
	// State its state ("ESTABLISHED", "LISTEN", "CONNECTED"), RecvQ and
	// SendQ its queues in bytes (for a listener: connections waiting,
	// backlog).
	Proto    string `json:"proto,omitempty"`
	Local    string `json:"local,omitempty"`
	Remote   string `json:"remote,omitempty"`
	Name     string `json:"name,omitempty"`
	PeerName string `json:"peer_name,omitempty"`
	State    string `json:"state,omitempty"`
	RecvQ    uint64 `json:"recv_q,omitempty"`
	SendQ    uint64 `json:"send_q,omitempty"`
	// NotAccepted: the connection waits in its listener's queue; Peers
	// then hold the listener.
	NotAccepted bool `json:"not_accepted,omitempty"`
	// Peers are the processes at the other end (of a pipe: the readers
	// of a write end, the writers of a read end).
	Peers []WaitPeer `json:"peers,omitempty"`
}

// WaitPeer is a process at the other end of a descriptor.
type WaitPeer struct {
	PID  int    `json:"pid"`
	Name string `json:"name,omitempty"`
	FD   int    `json:"fd"`
	// State is "running", "sleeping", "in uninterruptible sleep",
	// "stopped", "traced" or "exited"; "" for the process itself.
	State string `json:"state,omitempty"`
	Self  bool   `json:"self,omitempty"`
}

// Subject is what is at the other end, without what is particular to
// one descriptor (its number, a local port, queue lengths): the key by
// which a report groups the threads waiting on the same thing.
func (t *WaitTarget) Subject() string {
	var who []string
	for _, p := range t.Peers {
		if p.Self {
			who = append(who, "this process")
		} else {
			who = append(who, fmt.Sprintf("pid %d (%s)", p.PID, p.Name))
		}
	}
	peer := ""
	if len(who) > 0 {
		peer = " — " + strings.Join(who, ", ")
	}
	switch {
	case t.Kind == "socket" && t.Remote != "" && !strings.HasSuffix(t.Remote, ":0"):
		return strings.TrimSuffix(t.Proto, "v6") + " " + t.Remote + peer
	case t.Kind == "socket" && t.State == "LISTEN":
		return strings.TrimSuffix(t.Proto, "v6") + " listening on " + t.Local + t.Name
	case t.Kind == "socket" && t.PeerName != "":
		return "UNIX " + t.PeerName + peer
	case t.Kind == "socket" && strings.HasPrefix(t.Proto, "UNIX"):
		return "UNIX socket" + peer
	case t.Kind == "socket":
		return strings.TrimSuffix(t.Proto, "v6") + " socket" + peer
	case t.Kind == "pipe":
		return "a pipe" + peer
	case t.Path != "":
		s := t.Kind + " " + t.Path
		if t.Device != "" {
			s += " on " + t.Device
		}
		return s + peer
	}
	return t.Kind
}

// Subject is what the wait waits on, the same for every thread waiting
// on the same thing: a descriptor's other end (WaitTarget.Subject), a
// lock's owner, or the kind of wait.
func (w *Wait) Subject() string {
	switch {
	case w.On != nil:
		return w.On.Subject()
	case w.Owner != 0:
		return fmt.Sprintf("a lock held by tid %d", w.Owner)
	}
	switch w.Kind {
	case "sleep":
		return "a timeout"
	case "child":
		return "a child process"
	case "signal":
		return "a signal"
	case "poll":
		return "a poll set"
	case "kernel":
		return w.Desc
	}
	return w.Kind
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
