package model

import (
	"errors"
	"fmt"
)

// Why a thread or the whole process could not be read as asked (a
// snapshot's Thread.Err and PtraceErr). Reports render them as text;
// callers tell them apart with errors.Is and errors.As.
var (
	// ErrExited: the thread exited while it was read.
	ErrExited = errors.New("exited during the snapshot")
	// ErrRunning: the thread runs in user space and could not be
	// stopped, so its registers are not saved anywhere /proc shows.
	ErrRunning = errors.New("running in user space: no user stack without a ptrace stop")
	// ErrKernelThread: the process is a kernel thread; it has no user
	// space, nothing for ptrace to stop.
	ErrKernelThread = errors.New("a kernel thread: it has no user space to stop or read")
	// ErrOwnProcess: a process cannot ptrace its own threads (the kernel
	// refuses PTRACE_SEIZE within one thread group); stallwatch reads
	// its own threads without stops.
	ErrOwnProcess = errors.New("stallwatch's own process: a process cannot stop its own threads with ptrace")
)

// TracedError says that another tracer (a debugger, strace) holds a
// thread: a thread has one tracer at a time, so it is read without a
// stop while the other threads are stopped as usual.
type TracedError struct {
	TID        int
	Tracer     int    // the tracing thread's id, as in TracerPid
	TracerName string // its comm, "" when unknown
}

func (e *TracedError) Error() string {
	if e.TracerName != "" {
		return fmt.Sprintf("thread %d is traced by pid %d (%s); read without a stop", e.TID, e.Tracer, e.TracerName)
	}
	return fmt.Sprintf("thread %d is traced by pid %d; read without a stop", e.TID, e.Tracer)
}

// RefusedError is a ptrace stop the kernel refused although stallwatch
// holds CAP_SYS_PTRACE (or is the target's user): a security module
// (SELinux, AppArmor, Yama ptrace_scope 3, Landlock), or the kernel's or
// the platform's protection of that process (pid 1 of a sandbox, a
// process more privileged than stallwatch). Nothing a flag of
// stallwatch changes; --no-ptrace says the same without trying.
type RefusedError struct {
	PID, TID int
	Err      error // the errno
	// Why is what is known of the refusal: the facts that were checked.
	Why string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("ptrace of thread %d of pid %d refused (%v) although stallwatch is permitted: %s", e.TID, e.PID, e.Err, e.Why)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// ReadError is a /proc file of a thread that could not be read.
type ReadError struct {
	File string // "wchan", "schedstat", "syscall", ...
	Err  error
}

func (e *ReadError) Error() string { return e.File + ": " + e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }

// RecordedError is an error read back from a file that kept only its
// text (threads.json, a thread dump rebuilt from threads.pb.gz).
type RecordedError string

func (e RecordedError) Error() string { return string(e) }

// recorded turns an error's text read from a file back into an error (nil
// for "").
func recorded(s string) error {
	if s == "" {
		return nil
	}
	return RecordedError(s)
}

// errText is an error as a report prints it ("" for none): facts cross
// packages as errors and become text only at the edge.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
