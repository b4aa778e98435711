package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/daemon"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// pty is a pseudo-terminal: the test holds its master side.
type pty struct {
	master, slave *os.File
	mu            sync.Mutex
	out           bytes.Buffer
}

func openPty(t *testing.T) *pty {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		testutil.Skip(t, "no pseudo-terminal here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &pty{master: m, slave: s}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := m.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { s.Close(); m.Close() })
	return p
}

func (p *pty) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

func (p *pty) waitFor(t *testing.T, s string, within time.Duration) {
	t.Helper()
	if err := testutil.Eventually(within, func() bool { return strings.Contains(p.String(), s) }); err != nil {
		t.Fatalf("no %q on the terminal within %v:\n%s", s, within, p.String())
	}
}

// TestWatchCtrlCOnce: Ctrl-C on the terminal that runs `watch -- CMD`
// reaches the child once, as under a shell: the terminal sends SIGINT to
// the foreground group, and stallwatch does not send another (a child
// whose second Ctrl-C means "force quit" would exit 9).
func TestWatchCtrlCOnce(t *testing.T) {
	testutil.EndToEnd(t)
	term := openPty(t)
	dir := t.TempDir()
	beat := filepath.Join(dir, "beat")
	cmd := exec.Command(stallwatchBin(t), append(append([]string{"watch"}, quiet(beat)...),
		"--", beaterPath(t), "-file", beat, "-interval", "50ms", "-term-code", "9", "-term-ignore", "1")...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = term.slave, term.slave, term.slave
	// A session of its own whose controlling terminal is the pty: its
	// group is the terminal's foreground group, as a shell's job.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	if err := testutil.StartProcess(cmd); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	term.waitFor(t, "heartbeat healthy", 30*time.Second)

	if _, err := term.master.Write([]byte{0x03}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	term.waitFor(t, "ignored interrupt", 10*time.Second)
	if err := testutil.Eventually(10*time.Second, func() bool {
		select {
		case <-exited:
			return true
		default:
			return strings.Contains(term.String(), "waiting for the target to exit")
		}
	}); err != nil {
		t.Fatalf("stallwatch neither exited nor waited for the child after Ctrl-C:\n%s", term.String())
	}
	select {
	case <-exited:
		t.Fatalf("the child took one Ctrl-C for two and exited %d:\n%s", cmd.ProcessState.ExitCode(), term.String())
	default:
	}
	// SIGTERM to stallwatch alone is passed on: the child's second signal.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("stallwatch did not exit after SIGTERM:\n%s", term.String())
	}
	term.waitFor(t, "signal terminated", 10*time.Second)
	if got := cmd.ProcessState.ExitCode(); got != 9 || strings.Count(term.String(), "ignored ") != 1 {
		t.Errorf("exit %d, want the child's 9 after one ignored Ctrl-C and SIGTERM:\n%s", got, term.String())
	}
}

// TestWatchBrokenPipe: `watch … 2>&1 | head -2`. Once head has its two
// lines and exits, stallwatch's next log line meets a closed pipe; it
// goes on watching, and the child's stall is still captured.
func TestWatchBrokenPipe(t *testing.T) {
	testutil.RequirePerf(t)
	head := testutil.RequireTool(t, "head")
	dir := t.TempDir()
	beat, out := filepath.Join(dir, "beat"), filepath.Join(dir, "out")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	hd := exec.Command(head, "-2")
	hd.Stdin = r
	var got bytes.Buffer
	hd.Stdout = &got
	if err := hd.Start(); err != nil {
		t.Fatal(err)
	}
	sw := exec.Command(stallwatchBin(t), "watch", "--heartbeat-file", beat, "--stall-after", "1s", "--capture-for", "200ms",
		"--baseline-freq", "0", "--out", out, "--", "/bin/sh", "-c",
		// A child that writes nothing: it beats for 3 s, then hangs.
		`i=0; while [ $i -lt 60 ]; do touch "$0"; sleep 0.05; i=$((i+1)); done; exec sleep 120`, beat)
	sw.Stdout, sw.Stderr = w, w
	sw.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := testutil.StartProcess(sw); err != nil {
		t.Fatal(err)
	}
	r.Close()
	w.Close()
	exited := make(chan struct{})
	go func() { _ = sw.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-sw.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	if err := hd.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("head printed:\n%s", got.String())
	if err := testutil.Eventually(60*time.Second, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		ents, _ := os.ReadDir(out)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), "-stall") {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal("no capture of the child's stall after the pipe closed")
	}
	select {
	case <-exited:
		t.Fatalf("stallwatch ended after its log's reader went away: %v", sw.ProcessState)
	default:
	}
}

// TestDaemonBrokenPipe: the daemon's log on a pipe whose reader went away
// (under systemd, SIGPIPE is a clean exit that Restart=on-failure would
// not restart): it goes on, and answers.
func TestDaemonBrokenPipe(t *testing.T) {
	testutil.RequireRoot(t)
	config := "out: OUT\nmax-captures-per-hour: %d\nrules:\n  - name: none\n    match: {cmdline: '^" + marker() + "$'}\n    heartbeat-proc: true\n"
	e := newDaemonEnv(t, fmt.Sprintf(config, 30))
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d := exec.Command(stallwatchBin(t), "daemon", "--config", e.config, "--control-socket", e.socket, "--state-dir", filepath.Join(e.dir, "state"))
	d.Stdout, d.Stderr = w, w
	d.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := testutil.StartProcess(d); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan struct{})
	go func() { _ = d.Wait(); close(exited) }()
	t.Cleanup(func() { _ = d.Process.Kill(); <-exited })
	var log bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(log.String(), "msg=ready") {
		n, err := r.Read(buf)
		log.Write(buf[:n])
		if err != nil {
			t.Fatalf("no ready line: %v\n%s", err, log.String())
		}
	}
	r.Close()
	// A reload logs before its settings show in status.
	e.write(t, fmt.Sprintf(config, 7))
	if err := d.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Eventually(10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := daemon.Dial(ctx, e.socket, daemon.Request{Op: "status"})
		return err == nil && resp.Status.MaxPerHour == 7
	}); err != nil {
		select {
		case <-exited:
			t.Fatalf("the daemon ended when its log's reader went away: %v", d.ProcessState)
		default:
		}
		t.Fatal("the daemon did not reload")
	}
	select {
	case <-exited:
		t.Fatalf("the daemon ended when its log's reader went away: %v", d.ProcessState)
	default:
	}
}
