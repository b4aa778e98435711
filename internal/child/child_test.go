package child

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// started starts sh -c script with its stdout on a pipe, and waits for the
// line "ready" when the script prints one.
func started(t *testing.T, script string) (*Process, *os.File) {
	t.Helper()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(Config{Args: []string{"/bin/sh", "-c", script}, Env: []string{"CHILD_TEST=yes"}, Stdin: stdinR, Stdout: outW})
	stdinR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdinW.Close()
		_ = p.cmd.Process.Kill()
		<-p.Done()
		outR.Close()
	})
	if strings.Contains(script, "ready") {
		line, err := bufio.NewReader(outR).ReadString('\n')
		if err != nil || line != "ready\n" {
			t.Fatalf("child said %q, %v; want ready", line, err)
		}
	}
	return p, stdinW
}

func TestExitStatus(t *testing.T) {
	tests := []struct {
		name   string
		script string
		signal syscall.Signal // sent once the child is ready
		want   Status
		code   int
	}{
		{"exit code", "exit 7", 0, Status{Code: 7}, 7},
		{"success", "exit 0", 0, Status{}, 0},
		{"environment passed", `test "$CHILD_TEST" = yes || exit 9`, 0, Status{}, 0},
		{"killed by SIGTERM", "echo ready; exec sleep 60", syscall.SIGTERM, Status{Code: -1, Signal: syscall.SIGTERM}, 128 + 15},
		{"handles SIGINT", `trap 'exit 3' INT; echo ready; while :; do sleep 0.05; done`, syscall.SIGINT, Status{Code: 3}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := started(t, tc.script)
			if tc.signal != 0 {
				p.Signal(tc.signal)
			}
			st := p.Wait()
			if st != tc.want || st.ExitCode() != tc.code {
				t.Errorf("status %+v (exit code %d), want %+v (%d)", st, st.ExitCode(), tc.want, tc.code)
			}
		})
	}
}

func TestStartFails(t *testing.T) {
	if _, err := Start(Config{Args: []string{"/nonexistent/cmd"}}); err == nil || strings.Count(err.Error(), "/nonexistent/cmd") != 1 {
		t.Errorf("err %v, want one naming the command once", err)
	}
	if _, err := Start(Config{}); err == nil {
		t.Error("no command started without error")
	}
}

// A command that cannot start gives the exit code a shell gives, and the
// test asks the machine's sh for it: 127 not found, 126 not executable.
func TestStartErrorExitCode(t *testing.T) {
	dir := t.TempDir()
	noExec := dir + "/no-exec"
	garbage := dir + "/garbage"
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(garbage, []byte("\x7fELF\x00\x01garbage"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd  string
		want int
	}{
		{"/nonexistent", 127},
		{"stallwatch-no-such-command", 127},
		{dir + "/missing/deeper", 127},
		{noExec, 126},
		{dir, 126},
		{garbage, 126},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			_, err := Start(Config{Args: []string{tc.cmd, "arg"}})
			var se *StartError
			if !errors.As(err, &se) {
				t.Fatalf("err %v (%T), want a *StartError", err, err)
			}
			if got := se.ExitCode(); got != tc.want {
				t.Errorf("%v: exit code %d, want %d", err, got, tc.want)
			}
			sh := exec.Command("sh", "-c", `"$0" arg 2>/dev/null`, tc.cmd)
			if err := sh.Run(); sh.ProcessState == nil || sh.ProcessState.ExitCode() != tc.want {
				t.Errorf("sh exits %v (%v) where this test expects %d", sh.ProcessState, err, tc.want)
			}
			if strings.Count(err.Error(), tc.cmd) != 1 {
				t.Errorf("%q names the command other than once", err)
			}
		})
	}
}

func TestStopEscalates(t *testing.T) {
	// A child that ignores SIGTERM is killed after the grace period.
	p, _ := started(t, `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	start := time.Now()
	st := p.Stop(300 * time.Millisecond)
	if st.Signal != syscall.SIGKILL {
		t.Errorf("status %+v, want killed by SIGKILL", st)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("killed after %v, before the grace period", d)
	}
	// One that honours SIGTERM ends with it, well within the grace.
	p, _ = started(t, `echo ready; exec sleep 60`)
	if st := p.Stop(time.Minute); st.Signal != syscall.SIGTERM {
		t.Errorf("status %+v, want killed by SIGTERM", st)
	}
	// Stopping a child that is gone already is its status.
	p, _ = started(t, `exit 4`)
	<-p.Done()
	if st := p.Stop(time.Minute); st.Code != 4 {
		t.Errorf("status %+v of a child gone already, want 4", st)
	}
}

// TestPtraceStopIsNotAnExit stops the child's main thread as a snapshot
// does (PTRACE_SEIZE, PTRACE_INTERRUPT) while its Process waits for it.
// A plain wait from this process would return then, as though the child
// had finished; the Process must go on waiting and report the real exit.
func TestPtraceStopIsNotAnExit(t *testing.T) {
	testutil.RequirePtrace(t)
	p, stdin := started(t, `echo ready; read line; exit 3`)
	if StopSeenByWait(p.Pid, os.Getpid()) {
		t.Fatal("a child started by Start is said to have its stops seen by the wait")
	}
	stopAndResume(t, p)
	stdin.Close() // "read" returns: the child exits 3
	if st := p.Wait(); st.Code != 3 {
		t.Errorf("status %+v after a ptrace stop, want exit code 3", st)
	}
}

// stopAndResume stops pid's main thread under ptrace and, without taking
// the stop's notification itself (so that any other wait of this process
// could), checks that the Process does not end, then detaches.
func stopAndResume(t *testing.T, p *Process) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(p.Pid); err != nil {
		t.Fatalf("PTRACE_SEIZE: %v", err)
	}
	defer func() {
		if err := unix.PtraceDetach(p.Pid); err != nil {
			t.Errorf("PTRACE_DETACH: %v", err)
		}
	}()
	if err := unix.PtraceInterrupt(p.Pid); err != nil {
		t.Fatalf("PTRACE_INTERRUPT: %v", err)
	}
	if err := testutil.Eventually(5*time.Second, func() bool { return state(p.Pid) == 't' }); err != nil {
		t.Fatalf("the main thread did not reach a tracing stop: state %c", state(p.Pid))
	}
	// A plain wait blocked in waitid is woken by the stop and returns at
	// once; a Process must not. How long to watch for what must not happen
	// is the only judgement here.
	select {
	case <-p.Done():
		t.Errorf("the ptrace stop ended the wait for the child (%v): it was taken for an exit", p.err)
	case <-time.After(300 * time.Millisecond):
	}
}

func state(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

func TestStopSeenByWait(t *testing.T) {
	// A child this process started some other way: its wait would see the
	// stop.
	cmd := exec.Command("/bin/sh", "-c", "read line")
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { w.Close(); _ = cmd.Wait() }()
	if !StopSeenByWait(cmd.Process.Pid, os.Getpid()) {
		t.Error("a child started by os/exec: its stops would be seen by cmd.Wait")
	}
	if StopSeenByWait(cmd.Process.Pid, 1) {
		t.Error("a process that is not our child was said to be waited for by us")
	}
}
