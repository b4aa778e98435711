package model

import (
	"errors"
	"fmt"
	"syscall"
)

// Why a thread or the whole process could not be read as asked (a
// snapshot's Thread.Err and PtraceErr). Reports render them as text;
// callers tell them apart with errors.Is and errors.As, on a snapshot
// read back from threads.json as on one just taken.
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
// text (a thread dump rebuilt from threads.pb.gz, or an error of a kind
// this version does not know).
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

// The kinds of jsonError, one per error the snapshot makes.
const (
	errKindExited       = "exited"
	errKindRunning      = "running"
	errKindKernelThread = "kernel_thread"
	errKindOwnProcess   = "own_process"
	errKindTraced       = "traced"
	errKindRefused      = "refused"
	errKindRead         = "read"
)

var sentinels = []struct {
	kind string
	err  error
}{
	{errKindExited, ErrExited},
	{errKindRunning, ErrRunning},
	{errKindKernelThread, ErrKernelThread},
	{errKindOwnProcess, ErrOwnProcess},
}

// jsonError is one error as threads.json keeps it: its kind ("" for an
// error the model does not type), the facts of its type, and its text,
// which the error read back keeps whatever wrapped the typed one.
type jsonError struct {
	Kind       string `json:"kind"`
	Text       string `json:"text"`
	TID        int    `json:"tid,omitempty"`
	PID        int    `json:"pid,omitempty"`
	TracerPID  int    `json:"tracer_pid,omitempty"`
	TracerName string `json:"tracer,omitempty"`
	Errno      int    `json:"errno,omitempty"`
	Why        string `json:"why,omitempty"`
	File       string `json:"file,omitempty"`
	// Cause is the text of what a refusal (without an errno) or a failed
	// read wrapped.
	Cause string `json:"cause,omitempty"`
}

// errorRecords lists err's errors as errors.Join put them together (nil
// for none).
func errorRecords(err error) []jsonError {
	var out []jsonError
	for _, e := range joined(err, nil) {
		out = append(out, errorRecord(e))
	}
	return out
}

// joined flattens the trees errors.Join makes.
func joined(err error, out []error) []error {
	if err == nil {
		return out
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = joined(e, out)
		}
		return out
	}
	return append(out, err)
}

func errorRecord(err error) jsonError {
	r := jsonError{Text: err.Error()}
	var te *TracedError
	var re *RefusedError
	var rd *ReadError
	switch {
	case errors.As(err, &te):
		r.Kind, r.TID, r.TracerPID, r.TracerName = errKindTraced, te.TID, te.Tracer, te.TracerName
	case errors.As(err, &re):
		r.Kind, r.PID, r.TID, r.Why = errKindRefused, re.PID, re.TID, re.Why
		var errno syscall.Errno
		if errors.As(re.Err, &errno) {
			r.Errno = int(errno)
		} else {
			r.Cause = errText(re.Err)
		}
	case errors.As(err, &rd):
		r.Kind, r.File, r.Cause = errKindRead, rd.File, errText(rd.Err)
	default:
		for _, s := range sentinels {
			if errors.Is(err, s.err) {
				r.Kind = s.kind
				break
			}
		}
	}
	return r
}

// readErrors rebuilds the errors errorRecords wrote; a file without them
// (written before they were) gives its text alone.
func readErrors(recs []jsonError, text string) error {
	if len(recs) == 0 {
		return recorded(text)
	}
	errs := make([]error, 0, len(recs))
	for _, r := range recs {
		errs = append(errs, r.err())
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

func (r jsonError) err() error {
	var typed error
	switch r.Kind {
	case errKindTraced:
		typed = &TracedError{TID: r.TID, Tracer: r.TracerPID, TracerName: r.TracerName}
	case errKindRefused:
		cause := recorded(r.Cause)
		if r.Errno != 0 {
			cause = syscall.Errno(r.Errno)
		}
		typed = &RefusedError{PID: r.PID, TID: r.TID, Err: cause, Why: r.Why}
	case errKindRead:
		typed = &ReadError{File: r.File, Err: RecordedError(r.Cause)}
	default:
		for _, s := range sentinels {
			if r.Kind == s.kind {
				typed = s.err
			}
		}
	}
	switch {
	case typed == nil:
		return RecordedError(r.Text)
	case typed.Error() != r.Text:
		return &wrappedError{text: r.Text, err: typed}
	}
	return typed
}

// wrappedError is a typed error read back whose text said more than the
// type does (the context that wrapped it).
type wrappedError struct {
	text string
	err  error
}

func (e *wrappedError) Error() string { return e.text }
func (e *wrappedError) Unwrap() error { return e.err }
