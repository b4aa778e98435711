package snapshot

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"golang.org/x/sys/unix"
)

// stopKind says what kind of ptrace stop a thread was in.
type stopKind uint8

const (
	stopInterrupt stopKind = iota // our PTRACE_INTERRUPT
	stopGroup                     // the process was stopped by a signal (SIGSTOP, ...): it stays stopped
	stopSignal                    // a signal arrived first; it is delivered again at detach
)

// stopResult is what one brief stop of a thread produced.
type stopResult struct {
	regs  unwind.Regs
	trace unwind.Trace
	stop  time.Duration // PTRACE_INTERRUPT to PTRACE_DETACH: an upper bound of the stop
	held  time.Duration // the stop seen to PTRACE_DETACH: a lower bound
	kind  stopKind
	sig   unix.Signal
	// walkedAfter: the stack was walked in its copy after the thread was
	// let go (see stopThread).
	walkedAfter bool
	// exited: the thread exited while seized (nothing else is valid).
	exited bool
	// abandoned: the thread did not stop in time, or died while seized;
	// the tracing OS thread is let die, which makes the kernel detach it
	// or release it (see stopThread).
	abandoned bool
	err       error
}

// stopTimeout bounds the wait for a seized thread to stop. A thread in
// uninterruptible sleep (D) stops only when it leaves it; such threads are
// not seized at all (Take reads them without a stop). A thread that is
// still on its way into the stop is not stopped yet, so waiting costs the
// target nothing; on a loaded machine the scheduler can take hundreds of
// milliseconds to run it.
var stopTimeout = time.Second

// stackCopy is how much of the stack above SP is copied during the stop;
// unwinding reads beyond it from the live process.
const stackCopy = 16 << 10

// testHookStopped, when set, runs while a thread is stopped, after its
// registers were read (tests: panic, hang, kill the target there).
var testHookStopped func(tid int)

// stopThread stops one thread of pid with PTRACE_SEIZE and
// PTRACE_INTERRUPT, reads its registers and the top of its stack, unwinds
// it with u, calls during (when not nil) with the walk while the thread
// is still stopped (a runtime's frames are read there), and detaches.
//
// Without during and unless walkStopped, the thread is let go as soon as
// its registers are read and its stack copied — two system calls — and
// the walk reads the copy alone, after the detach: the thread is held for
// no unwinding. A walk that then ends short of the thread's first
// function for any reason but its depth (it needed more than the copy,
// or memory outside the stack, as a Go thread's g0) may be one the live
// stack would have taken further: the caller stops the thread again with
// walkStopped, which walks it under the stop with the live memory beyond
// the copy, as every walk was before.
//
// ptrace binds a tracee to the OS thread that seized it, so the sequence
// runs on a goroutine locked to its OS thread. On every path that returns
// normally the thread is detached before the goroutine ends; if the
// tracee never stops (so PTRACE_DETACH cannot be issued) the goroutine
// ends still locked, the Go runtime terminates that OS thread, and the
// kernel detaches every tracee of an exiting tracer. The same holds if
// stallwatch itself dies, by any signal: no path leaves a thread stopped
// or traced. PTRACE_O_EXITKILL is never set.
func stopThread(pid, tid int, u *unwind.Process, live *addrspace.Memory, maxFrames int, during func(unwind.Regs, unwind.Trace), walkStopped bool) stopResult {
	ch := make(chan stopResult, 1)
	go tracer(ch, pid, tid, u, live, maxFrames, during, walkStopped)
	return <-ch
}

// tracer runs traceOnce on a locked OS thread that is not the process's
// main thread: Go parks rather than ends the main thread when a locked
// goroutine exits on it, so it could never hand its tracees back.
func tracer(ch chan<- stopResult, pid, tid int, u *unwind.Process, live *addrspace.Memory, maxFrames int, during func(unwind.Regs, unwind.Trace), walkStopped bool) {
	runtime.LockOSThread()
	if unix.Gettid() == os.Getpid() {
		// While this goroutine holds the main thread locked, the one
		// it starts runs on another.
		inner := make(chan stopResult, 1)
		go tracer(inner, pid, tid, u, live, maxFrames, during, walkStopped)
		ch <- <-inner
		runtime.UnlockOSThread()
		return
	}
	res := traceOnce(pid, tid, u, live, maxFrames, during, walkStopped)
	ch <- res
	if !res.abandoned {
		runtime.UnlockOSThread()
	}
	// abandoned: return while locked; the OS thread exits.
}

// traceOnce is stopThread's body, on the locked OS thread.
func traceOnce(pid, tid int, u *unwind.Process, live *addrspace.Memory, maxFrames int, during func(unwind.Regs, unwind.Trace), walkStopped bool) (res stopResult) {
	// Allocated before the stop: an allocation under it may be made to
	// help the garbage collector first.
	dump := make([]byte, stackCopy)
	copier := newStackCopier(dump)
	if err := unix.PtraceSeize(tid); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return stopResult{exited: true}
		}
		return stopResult{err: fmt.Errorf("PTRACE_SEIZE thread %d: %w", tid, err)}
	}
	start := time.Now()
	var seen, detached time.Time
	attached := true
	detachSig := 0
	// detach lets the thread go, handing back a signal that was being
	// delivered when it stopped (x/sys's PtraceDetach always passes 0).
	detach := func() {
		if !attached {
			return
		}
		attached = false
		_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(tid), 0, uintptr(detachSig), 0, 0)
		detached = time.Now()
		if e == 0 {
			res.sig = unix.Signal(detachSig)
			return
		}
		// ESRCH: the thread is gone (and, being traced, waits for us to
		// reap it), or it is not stopped. Reap it if it is dead; else let
		// the OS thread die: the kernel detaches the live and releases
		// the dead tracees of an exiting tracer.
		if e == unix.ESRCH && reap(tid) {
			return
		}
		res.abandoned = true
		if e != unix.ESRCH && res.err == nil {
			res.err = fmt.Errorf("PTRACE_DETACH thread %d: %w", tid, e)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			res = stopResult{err: fmt.Errorf("internal error while thread %d was stopped (it was let go): %v", tid, p)}
		}
		detach()
		if detached.IsZero() {
			detached = time.Now()
		}
		res.stop = detached.Sub(start)
		if !seen.IsZero() {
			res.held = detached.Sub(seen)
		}
	}()
	if err := unix.PtraceInterrupt(tid); err != nil {
		if errors.Is(err, unix.ESRCH) {
			attached = false
			return stopResult{exited: true, abandoned: !reap(tid)}
		}
		return stopResult{err: fmt.Errorf("PTRACE_INTERRUPT thread %d: %w", tid, err)}
	}
	ws, gone, err := waitStop(tid, start.Add(stopTimeout))
	seen = time.Now()
	switch {
	case gone:
		attached = false
		return stopResult{exited: true, abandoned: !reap(tid)}
	case err != nil:
		attached = false // cannot detach a running tracee
		return stopResult{abandoned: true, err: err}
	}
	sig := ws.StopSignal()
	event := (uint32(ws) >> 16) & 0xff
	switch {
	case event == unix.PTRACE_EVENT_STOP && sig == unix.SIGTRAP:
		res.kind = stopInterrupt
	case event == unix.PTRACE_EVENT_STOP:
		res.kind = stopGroup
	case event == 0:
		// A signal-delivery-stop: the signal was being delivered when
		// we stopped the thread; hand it back at detach.
		res.kind = stopSignal
		detachSig = int(sig)
	}
	var regs unix.PtraceRegs
	if err := getRegs(tid, &regs); err != nil {
		if errors.Is(err, unix.ESRCH) {
			attached = false
			return stopResult{exited: true, abandoned: !reap(tid)}
		}
		detach()
		return stopResult{err: fmt.Errorf("PTRACE_GETREGS thread %d: %w", tid, err), kind: res.kind}
	}
	res.regs = regsOf(&regs)
	if testHookStopped != nil {
		testHookStopped(tid)
	}
	n := copier.read(tid, res.regs.SP)
	if during == nil && !walkStopped {
		detach()
		res.trace = u.UnwindTrace(res.regs, unwind.DumpMemory(res.regs.SP, dump[:n]), maxFrames)
		res.walkedAfter = true
		return res
	}
	mem := unwind.Fallback(unwind.DumpMemory(res.regs.SP, dump[:n]), live)
	res.trace = u.UnwindTrace(res.regs, mem, maxFrames)
	if during != nil {
		during(res.regs, res.trace)
	}
	detach()
	return res
}

// The system calls made while a thread is stopped are raw: a system call
// made the usual way lets the Go scheduler hand this goroutine's P to
// another when it takes a while, and the goroutine then waits for a P
// to come back to it (milliseconds, with more goroutines than CPUs on a
// loaded machine: most of the longest stops measured) with the thread
// still stopped. These calls are brief; the copy may wait for a page
// of the stack to be read in (the P is held meanwhile), seldom.

// getRegs is PTRACE_GETREGS.
func getRegs(tid int, regs *unix.PtraceRegs) error {
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_GETREGS, uintptr(tid), 0, uintptr(unsafe.Pointer(regs)), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// stackCopier copies the top of a stopped thread's stack into its buffer
// with one process_vm_readv, a page an iovec so that the copy ends at the
// first page that cannot be read; everything is set up before the stop.
type stackCopier struct {
	buf    []byte
	local  [stackCopy/pageSize + 1]unix.Iovec
	remote [stackCopy/pageSize + 1]unix.RemoteIovec
}

const pageSize = 4096

func newStackCopier(buf []byte) *stackCopier { return &stackCopier{buf: buf} }

// read copies what it can of len(c.buf) bytes at addr of tid's memory
// and returns how many bytes it copied.
func (c *stackCopier) read(tid int, addr uint64) int {
	n := 0
	for off := 0; off < len(c.buf) && n < len(c.local); n++ {
		chunk := min(len(c.buf)-off, int(pageSize-(addr+uint64(off))%pageSize))
		c.local[n] = unix.Iovec{Base: &c.buf[off]}
		c.local[n].SetLen(chunk)
		c.remote[n] = unix.RemoteIovec{Base: uintptr(addr) + uintptr(off), Len: chunk}
		off += chunk
	}
	got, _, e := unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(tid),
		uintptr(unsafe.Pointer(&c.local[0])), uintptr(n), uintptr(unsafe.Pointer(&c.remote[0])), uintptr(n), 0)
	if e != 0 || int(got) < 0 {
		return 0
	}
	return int(got)
}

// waitStop waits for tid's stop after PTRACE_INTERRUPT. gone reports that
// the thread exited instead. Waiting polls with WNOHANG so that a thread
// that does not stop (uninterruptible sleep) cannot hold us past deadline.
// __WALL is needed for threads other than the leader.
func waitStop(tid int, deadline time.Time) (ws unix.WaitStatus, gone bool, err error) {
	for i := 0; ; i++ {
		wpid, err := unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			return ws, true, nil
		case err != nil:
			return ws, false, fmt.Errorf("wait for thread %d: %w", tid, err)
		case wpid == tid && (ws.Exited() || ws.Signaled()):
			return ws, true, nil
		case wpid == tid && ws.Stopped():
			return ws, false, nil
		}
		if time.Now().After(deadline) {
			return ws, false, fmt.Errorf("thread %d did not stop within %v", tid, stopTimeout)
		}
		if i < 30 {
			// The thread usually stops within microseconds: give it
			// the CPU rather than sleeping a scheduler tick.
			unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		// Once stopped, the thread waits for us: poll finely.
		time.Sleep(min(time.Duration(10<<min(i-30, 4))*time.Microsecond, 200*time.Microsecond))
	}
}

// reap collects the exit of a traced thread that died, which only its
// tracer can do (until then it stays a zombie and its process cannot be
// reaped). It reports whether the thread is gone for good.
func reap(tid int) bool {
	var ws unix.WaitStatus
	for i := 0; i < 50; i++ {
		wpid, err := unix.Wait4(tid, &ws, unix.WALL|unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return errors.Is(err, unix.ECHILD) // not ours to wait for
		case wpid == tid && (ws.Exited() || ws.Signaled()):
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}

// tracedByUs reports whether a thread's status names a thread of this
// process as its tracer (TracerPid is the tracing thread's id).
func tracedByUs(st procfs.Status) bool {
	if st.TracerPid == 0 {
		return false
	}
	if st.TracerPid == os.Getpid() {
		return true
	}
	tr, err := procfs.ReadStatus(st.TracerPid, st.TracerPid)
	return err == nil && tr.Tgid == os.Getpid()
}
