package hook

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults of Config.
const (
	DefaultTimeout    = 30 * time.Second
	DefaultMaxRunning = 4
	// killGrace is how long a hook has between SIGTERM and SIGKILL.
	killGrace = 2 * time.Second
	// detachGrace is how long what a hook started in the background has,
	// once the hook exited, to leave its process group (setsid) before
	// the group is ended.
	detachGrace = 100 * time.Millisecond
	// maxOutput bounds what one run puts in the log.
	maxOutput = 64 << 10
)

// Env is what a hook is told.
type Env struct {
	Event      string // "capture" or "recover"
	Dir        string // the capture directory; "" when the stall had none
	PID        int
	Process    string
	Trigger    string        // stall, signal, manual
	Stall      time.Duration // silence at the trigger; the whole stall on recovery
	TopFinding string
	Service    string
	Host       string
}

// Vars are the environment variables of e.
func (e Env) Vars() []string {
	return []string{
		"STALLWATCH_EVENT=" + e.Event,
		"STALLWATCH_CAPTURE_DIR=" + e.Dir,
		"STALLWATCH_PID=" + strconv.Itoa(e.PID),
		"STALLWATCH_PROCESS=" + e.Process,
		"STALLWATCH_TRIGGER=" + e.Trigger,
		"STALLWATCH_STALL_SECONDS=" + strconv.FormatFloat(e.Stall.Round(time.Millisecond).Seconds(), 'f', -1, 64),
		"STALLWATCH_TOP_FINDING=" + e.TopFinding,
		"STALLWATCH_SERVICE=" + e.Service,
		"STALLWATCH_HOST=" + e.Host,
	}
}

// Config configures a Runner.
type Config struct {
	Timeout    time.Duration // a hook's longest run; default DefaultTimeout
	MaxRunning int           // default DefaultMaxRunning
	Logger     *slog.Logger
	Shell      string // default /bin/sh
}

// Stats count the runs so far.
type Stats struct {
	Started, Succeeded, Failed, Killed int
}

// Runner runs hooks; one serves every target of a process.
type Runner struct {
	cfg  Config
	log  *slog.Logger
	sem  chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	runs map[*exec.Cmd]struct{}
	st   Stats
	done bool
}

// New returns a Runner.
func New(cfg Config) *Runner {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = DefaultMaxRunning
	}
	if cfg.Shell == "" {
		cfg.Shell = "/bin/sh"
	}
	r := &Runner{cfg: cfg, log: cfg.Logger, sem: make(chan struct{}, cfg.MaxRunning), runs: map[*exec.Cmd]struct{}{}}
	if r.log == nil {
		r.log = slog.Default()
	}
	return r
}

// Start runs command for an event, in the background: it returns at once.
// name says which hook it is in the log ("on-capture").
func (r *Runner) Start(name, command string, env Env) {
	if command == "" {
		return
	}
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		r.log.Warn("hook not run: stallwatch is stopping", "hook", name, "pid", env.PID)
		return
	}
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		r.sem <- struct{}{}
		defer func() { <-r.sem }()
		r.run(name, command, env)
	}()
}

func (r *Runner) run(name, command string, env Env) {
	cmd := exec.Command(r.cfg.Shell, "-c", command)
	cmd.Env = append(os.Environ(), env.Vars()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The output goes through a pipe of our own: a child the hook left in
	// the background (or in a session of its own) may hold it open after
	// the hook exits, and the hook's end must not wait for it.
	pr, pw, err := os.Pipe()
	if err != nil {
		r.count(func(s *Stats) { s.Failed++ })
		r.log.Error("hook could not start", "hook", name, "pid", env.PID, "err", err)
		return
	}
	defer pr.Close()
	cmd.Stdout, cmd.Stderr = pw, pw
	r.mu.Lock()
	stopping := r.done
	if !stopping {
		if err = cmd.Start(); err == nil {
			r.runs[cmd] = struct{}{}
			r.st.Started++
		}
	}
	r.mu.Unlock()
	pw.Close()
	if stopping {
		return
	}
	if err != nil {
		r.count(func(s *Stats) { s.Failed++ })
		r.log.Error("hook could not start", "hook", name, "pid", env.PID, "err", err)
		return
	}
	begin := time.Now()
	r.log.Info("hook started", "hook", name, "hook_pid", cmd.Process.Pid, "pid", env.PID, "event", env.Event, "dir", env.Dir)
	logged := make(chan struct{})
	go func() {
		r.logOutput(name, pr)
		close(logged)
	}()

	killed := make(chan struct{})
	timer := time.AfterFunc(r.cfg.Timeout, func() {
		close(killed)
		r.kill(cmd)
	})
	left := r.endGroup(cmd)
	err = cmd.Wait()
	timer.Stop()
	select {
	case <-logged:
	case <-time.After(killGrace):
		pr.Close() // what is left behind keeps the pipe; stop reading it
		<-logged
	}
	r.mu.Lock()
	delete(r.runs, cmd)
	r.mu.Unlock()

	took := time.Since(begin).Round(time.Millisecond)
	if left > 0 {
		r.log.Warn("hook left processes behind in its group: ended with it (start what must outlive the hook in a session of its own: setsid CMD >/dev/null 2>&1 &)",
			"hook", name, "pid", env.PID, "processes", left)
	}
	select {
	case <-killed:
		r.count(func(s *Stats) { s.Killed++ })
		r.log.Warn("hook killed: it ran longer than its bound", "hook", name, "pid", env.PID, "timeout", r.cfg.Timeout, "took", took)
		return
	default:
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		r.count(func(s *Stats) { s.Succeeded++ })
		r.log.Info("hook finished", "hook", name, "pid", env.PID, "took", took)
	case errors.As(err, &ee):
		r.count(func(s *Stats) { s.Failed++ })
		r.log.Warn("hook failed", "hook", name, "pid", env.PID, "status", exitStatus(ee), "took", took)
	default:
		r.count(func(s *Stats) { s.Failed++ })
		r.log.Warn("hook failed", "hook", name, "pid", env.PID, "err", err, "took", took)
	}
}

// endGroup waits for the hook's shell to exit, without reaping it (its
// zombie keeps the group's id from being reused), then ends what it left
// in its process group detachGrace later: SIGTERM, and SIGKILL to
// whatever is still there after killGrace. It returns how many processes
// were left.
func (r *Runner) endGroup(cmd *exec.Cmd) int {
	pid := cmd.Process.Pid
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			if err != nil {
				return 0
			}
			break
		}
	}
	if groupMembers(pid) == 0 {
		return 0
	}
	// A child on its way out of the group (setsid, between fork and
	// setsid()) is given a moment to leave it.
	time.Sleep(detachGrace)
	left := groupMembers(pid)
	if left == 0 {
		return 0
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(killGrace)
	for groupMembers(pid) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling a group that has no event to wait on
	}
	if groupMembers(pid) > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	return left
}

// groupMembers counts the live processes of process group pgid other than
// its leader, from /proc/PID/stat.
func groupMembers(pgid int) int {
	d, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	n := 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == pgid {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …: comm may hold anything but its
		// last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 || string(f[0]) == "Z" {
			continue
		}
		if g, err := strconv.Atoi(string(f[2])); err == nil && g == pgid {
			n++
		}
	}
	return n
}

// kill ends a hook's whole process group: SIGTERM, then SIGKILL after
// killGrace.
func (r *Runner) kill(cmd *exec.Cmd) {
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	time.AfterFunc(killGrace, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
}

func exitStatus(ee *exec.ExitError) string {
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("exit %d", ee.ExitCode())
}

// logOutput logs each line of a hook's output, at most maxOutput bytes,
// then says how much more there was.
func (r *Runner) logOutput(name string, out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, maxLine), maxLine+1)
	sc.Split(splitLongLines)
	logged, dropped := 0, 0
	for sc.Scan() {
		line := sc.Bytes()
		if logged+len(line) > maxOutput {
			dropped += len(line) + 1
			continue
		}
		logged += len(line) + 1
		r.log.Info("hook output", "hook", name, "line", string(line))
	}
	if dropped > 0 {
		r.log.Warn("hook output not logged: over the bound", "hook", name, "bytes", dropped, "bound", maxOutput)
	}
}

// maxLine is the longest line logged whole; a longer one is cut.
const maxLine = 4096

// splitLongLines is bufio.ScanLines that cuts a line longer than maxLine
// instead of failing.
func splitLongLines(data []byte, atEOF bool) (int, []byte, error) {
	adv, tok, err := bufio.ScanLines(data, atEOF)
	if adv == 0 && tok == nil && err == nil && len(data) >= maxLine {
		return maxLine, data[:maxLine], nil
	}
	return adv, tok, err
}

func (r *Runner) count(f func(*Stats)) {
	r.mu.Lock()
	f(&r.st)
	r.mu.Unlock()
}

// Stats returns the counts so far.
func (r *Runner) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

// Close waits up to grace for running hooks, then kills them; hooks not
// started yet are not run.
func (r *Runner) Close(grace time.Duration) {
	r.mu.Lock()
	r.done = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-time.After(grace):
	}
	r.mu.Lock()
	for cmd := range r.runs {
		r.log.Warn("hook killed: stallwatch is stopping", "hook_pid", cmd.Process.Pid)
		r.kill(cmd)
	}
	r.mu.Unlock()
	<-done
}
