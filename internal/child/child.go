// Package child runs a target that stallwatch starts itself (`watch -- CMD`):
// it starts the command in stallwatch's own process group (a terminal's
// Ctrl-C reaches both, as a shell's job), passes signals on to it (the
// caller leaves out the ones the terminal gave the group: InForeground),
// ends it when stallwatch cannot watch it, and gives back its exit status
// as a shell would.
//
// It also owns the one rule that makes a child different from any other
// target. A ptrace stop of a process's main thread is reported to whoever
// waits for that process, and stallwatch is both the child's parent and,
// during a snapshot, its tracer: a plain wait (Go's cmd.Wait) would take a
// snapshot's stop for the child stopping. A Process therefore reaps only
// after a pidfd said the child exited — a pidfd becomes readable on exit,
// never on a stop — and StopSeenByWait tells the snapshot which children
// are not started this way, so that their main thread is read without a
// stop.
package child

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a child started by Start.
type Process struct {
	Pid  int
	cmd  *exec.Cmd
	log  *slog.Logger
	done chan struct{} // closed once the child exited and was reaped
	err  error         // cmd.Wait's, once done is closed
}

// Config says what to start.
type Config struct {
	Args []string // the command and its arguments
	Env  []string // added to stallwatch's environment
	// Stdin, Stdout and Stderr default to stallwatch's own.
	Stdin          *os.File
	Stdout, Stderr *os.File
	Logger         *slog.Logger
}

// Start starts the command.
func Start(cfg Config) (*Process, error) {
	if len(cfg.Args) == 0 {
		return nil, errors.New("child: no command")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cmd := exec.Command(cfg.Args[0], cfg.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = orFile(cfg.Stdin, os.Stdin), orFile(cfg.Stdout, os.Stdout), orFile(cfg.Stderr, os.Stderr)
	cmd.Env = append(os.Environ(), cfg.Env...)
	// Registered in the same step as it starts, so that no snapshot can
	// find it unregistered.
	reapers.Lock()
	err := cmd.Start()
	if err == nil {
		reapers.pids[cmd.Process.Pid] = true
	}
	reapers.Unlock()
	if err != nil {
		return nil, startError(cfg.Args[0], err)
	}
	p := &Process{Pid: cmd.Process.Pid, cmd: cmd, log: log, done: make(chan struct{})}
	go p.reap()
	log.Info("started", "pid", p.Pid, "cmd", strings.Join(cfg.Args, " "))
	return p, nil
}

// StartError is a command that could not be started. Its ExitCode is
// what a shell, env or timeout exits with for the same command: 127 when
// there is no such command (ENOENT, or a name not in $PATH), 126 when it
// was there but could not be executed (EACCES, ENOEXEC, EISDIR, ENOTDIR
// on the way …).
type StartError struct {
	Name string // the command as given
	Err  error  // the system's reason: an errno, or exec.ErrNotFound
}

func (e *StartError) Error() string {
	if errors.Is(e.Err, exec.ErrNotFound) {
		return fmt.Sprintf("cannot run %s: no such command in $PATH", e.Name)
	}
	return fmt.Sprintf("cannot run %s: %v", e.Name, e.Err)
}

func (e *StartError) Unwrap() error { return e.Err }

// ExitCode is 127 when the command was not found, else 126.
func (e *StartError) ExitCode() int {
	if errors.Is(e.Err, exec.ErrNotFound) || errors.Is(e.Err, syscall.ENOENT) {
		return 127
	}
	return 126
}

// startError keeps cmd.Start's reason without its repeat of the path.
func startError(name string, err error) *StartError {
	var pe *fs.PathError
	var ee *exec.Error
	switch {
	case errors.As(err, &pe):
		err = pe.Err
	case errors.As(err, &ee):
		err = ee.Err
	}
	return &StartError{Name: name, Err: err}
}

func orFile(f, def *os.File) *os.File {
	if f != nil {
		return f
	}
	return def
}

// reap waits for the exit, then reaps: see the package doc.
func (p *Process) reap() {
	waitExited(p.Pid)
	p.err = p.cmd.Wait()
	reapers.Lock()
	delete(reapers.pids, p.Pid)
	reapers.Unlock()
	close(p.done)
}

// waitExited blocks until process pid has exited, without reaping it.
// Kernels without pidfd_open (before 5.3) return at once, and the wait
// that follows is a plain one.
func waitExited(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, -1); err != unix.EINTR {
			return
		}
	}
}

// Done is closed once the child has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// InForeground reports whether this process's group is the foreground
// group of its controlling terminal: a SIGINT (Ctrl-C) or SIGQUIT then
// came from the terminal to the whole group, a child started by Start
// (which stays in the group, as a shell's job does) included.
func InForeground() bool {
	fd, err := unix.Open("/dev/tty", unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false // no controlling terminal
	}
	defer unix.Close(fd)
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pgrp == unix.Getpgrp()
}

// Signal passes sig on to the child; a child already gone is no error.
func (p *Process) Signal(sig os.Signal) {
	p.log.Info("forwarding signal to the target", "signal", sig, "pid", p.Pid)
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		p.log.Warn("forwarding signal", "signal", sig, "pid", p.Pid, "err", err)
	}
}

// Wait waits for the child to exit and returns its status. How it ended
// is the caller's to say: the watchdog has already logged the exit.
func (p *Process) Wait() Status {
	select {
	case <-p.done:
	default:
		p.log.Info("waiting for the target to exit", "pid", p.Pid)
		<-p.done
	}
	return statusOf(p.err)
}

// Stop ends a child that stallwatch cannot watch after all: SIGTERM, then
// SIGKILL if it has not exited after grace. It returns once the child is
// reaped.
func (p *Process) Stop(grace time.Duration) Status {
	select {
	case <-p.done:
		return statusOf(p.err)
	default:
	}
	p.log.Warn("stopping the target: stallwatch cannot watch it", "pid", p.Pid)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.log.Warn("the target ignored SIGTERM; killing it", "pid", p.Pid, "after", grace)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return statusOf(p.err)
}

// Status is how a child ended.
type Status struct {
	Code   int            // its exit code; -1 when a signal killed it
	Signal syscall.Signal // the signal that killed it, or 0
}

// ExitCode is the status as a shell gives it: the exit code, or 128+N
// when signal N killed the child.
func (s Status) ExitCode() int {
	if s.Signal != 0 {
		return 128 + int(s.Signal)
	}
	return s.Code
}

func statusOf(err error) Status {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return Status{}
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Status{Code: -1, Signal: ws.Signal()}
	}
	return Status{Code: ee.ExitCode()}
}

// reapers are the children of this process that a Process reaps.
var reapers = struct {
	sync.Mutex
	pids map[int]bool
}{pids: map[int]bool{}}

// StopSeenByWait reports whether a ptrace stop of process pid's main
// thread could be taken, by this process's own wait for its child, for
// the child stopping: pid is a child of this process not started by Start
// (whose wait comes only after the exit). ppid is pid's parent, as read
// from /proc by the caller.
func StopSeenByWait(pid, ppid int) bool {
	if ppid != os.Getpid() {
		return false
	}
	reapers.Lock()
	defer reapers.Unlock()
	return !reapers.pids[pid]
}
