package fdtarget

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"golang.org/x/sys/unix"
)

// testSyscalls names the x86-64 system calls the waits target blocks in.
var testSyscalls = map[int]string{0: "read", 1: "write", 45: "recvfrom", 232: "epoll_wait", 281: "epoll_pwait"}

func testNamer(nr int) (string, bool) {
	n, ok := testSyscalls[nr]
	return n, ok
}

// waitsTarget is a running testdata/waits with its threads blocked.
type waitsTarget struct {
	*testutil.Target
	tids, pids        map[string]int
	port, backlogPort int
	sock              string
}

func startWaits(t *testing.T) *waitsTarget {
	t.Helper()
	return startWaitsCmd(t, exec.Command)
}

// startWaitsCmd starts testdata/waits through command (exec.Command, or
// one that wraps it), which must keep the pid (exec, not fork).
func startWaitsCmd(t *testing.T, command func(name string, args ...string) *exec.Cmd) *waitsTarget {
	t.Helper()
	testutil.RequireRoot(t) // syscall files of another process
	bin := testutil.BuildC(t, "waits/waits.c")
	sock := filepath.Join(t.TempDir(), "unixpeer.sock")
	tg := testutil.StartCmd(t, command(bin, sock))
	line := tg.WaitLine(t, "ready", 30*time.Second)
	w := &waitsTarget{Target: tg, tids: map[string]int{}, pids: map[string]int{}, sock: sock}
	for _, f := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(f, "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "tcp", "pipe", "epoll", "unix", "backlogtid", "unixbacklogtid":
			w.tids[k] = n
		case "port":
			w.port = n
		case "backlogport":
			w.backlogPort = n
		default:
			w.pids[k] = n
		}
	}
	t.Cleanup(func() {
		// A stopped logger dies with its parent all the same (SIGKILL).
		_ = syscall.Kill(w.pids["logger"], syscall.SIGCONT)
	})
	return w
}

// waitState waits until process pid's main thread is in state (a
// /proc stat letter): a stopped process has taken its SIGSTOP, a child
// has gone to sleep in its accept or pause.
func waitState(t testing.TB, pid int, state byte) {
	t.Helper()
	var st procfs.Stat
	if err := testutil.Eventually(20*time.Second, func() bool {
		var err error
		st, err = procfs.ReadStat(pid, pid)
		return err == nil && st.State == state
	}); err != nil {
		t.Fatalf("pid %d never in state %c (last %c)", pid, state, st.State)
	}
}

// settle waits until the server and peers sleep and the stopped logger
// is stopped: the states the tests' descriptions say.
func (w *waitsTarget) settle(t testing.TB, loggerStopped bool) {
	t.Helper()
	for _, who := range []string{"server", "unixpeer", "backlog", "unixbacklog"} {
		waitState(t, w.pids[who], 'S')
	}
	if loggerStopped {
		waitState(t, w.pids["logger"], 'T')
	}
}

// blockedFD waits until thread tid is blocked in a system call named one
// of names and returns its descriptor.
func (w *waitsTarget) blockedFD(t testing.TB, tid int, names ...string) int {
	t.Helper()
	var sc procfs.Syscall
	err := testutil.Eventually(20*time.Second, func() bool {
		var err error
		sc, err = procfs.ReadSyscall(w.Pid, tid)
		if err != nil || sc.Running || sc.Nr < 0 {
			return false
		}
		n, _ := testNamer(sc.Nr)
		for _, want := range names {
			if n == want {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("thread %d never blocked in %v (last: %+v)", tid, names, sc)
	}
	return int(int32(sc.Args[0]))
}

// TestWaitsOnPeers: each blocked thread's descriptor is named with what
// is at its other end, the peers by pid.
func TestWaitsOnPeers(t *testing.T) {
	w := startWaits(t)
	// Stop the pipe's reader: the writer fills the pipe and blocks.
	if err := syscall.Kill(w.pids["logger"], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	fds := map[string]int{
		"tcp":         w.blockedFD(t, w.tids["tcp"], "recvfrom"),
		"pipe":        w.blockedFD(t, w.tids["pipe"], "write"),
		"epoll":       w.blockedFD(t, w.tids["epoll"], "epoll_wait", "epoll_pwait"),
		"unix":        w.blockedFD(t, w.tids["unix"], "read"),
		"backlog":     w.blockedFD(t, w.tids["backlogtid"], "recvfrom"),
		"unixbacklog": w.blockedFD(t, w.tids["unixbacklogtid"], "read"),
	}
	w.settle(t, true)
	res := Resolve(w.Pid, []int{fds["tcp"], fds["pipe"], fds["epoll"], fds["unix"], fds["backlog"], fds["unixbacklog"]}, Options{Syscall: testNamer})
	for _, n := range res.Notes {
		t.Logf("note: %s", n)
	}
	for name, fd := range fds {
		t.Logf("%s: fd %d → %s", name, fd, res.Targets[fd])
	}

	t.Run("tcp", func(t *testing.T) {
		tt := res.Targets[fds["tcp"]]
		s := tt.Socket
		if s == nil || !s.Found || s.Proto != "TCP" || s.State != "ESTABLISHED" || s.Remote.Port() != uint16(w.port) || !s.HasQueues || s.RecvQ != 0 {
			t.Fatalf("socket %+v", s)
		}
		if len(tt.Peers) != 1 || tt.Peers[0].PID != w.pids["server"] || tt.Peers[0].Name != "server" {
			t.Fatalf("peers %+v, want the server, pid %d", tt.Peers, w.pids["server"])
		}
		want := fmt.Sprintf("TCP 127.0.0.1:%d (ESTABLISHED, 0 bytes queued; from 127.0.0.1:", w.port)
		if got := tt.String(); !strings.HasPrefix(got, want) || !strings.Contains(got, fmt.Sprintf(" — pid %d (server), sleeping", w.pids["server"])) {
			t.Errorf("%q, want %q… — pid %d (server), sleeping", got, want, w.pids["server"])
		}
	})
	t.Run("pipe", func(t *testing.T) {
		tt := res.Targets[fds["pipe"]]
		if tt.Kind != KindPipe {
			t.Fatalf("kind %s (%s)", tt.Kind, tt.Link)
		}
		want := fmt.Sprintf("%s read by pid %d (logger), which is stopped", tt.Link, w.pids["logger"])
		if got := tt.String(); got != want {
			t.Errorf("%q, want %q", got, want)
		}
	})
	t.Run("epoll", func(t *testing.T) {
		tt := res.Targets[fds["epoll"]]
		if tt.Kind != KindEpoll || tt.Epoll.Count != 3 || len(tt.Epoll.Items) != 3 {
			t.Fatalf("epoll %+v", tt.Epoll)
		}
		protos := map[string]bool{}
		for _, it := range tt.Epoll.Items {
			if it.Closed || it.Target.Socket == nil || !it.Target.Socket.Found || it.Events&1 == 0 {
				t.Errorf("item %+v → %s", it, it.Target)
				continue
			}
			protos[it.Target.Socket.Proto] = true
		}
		if !protos["TCP"] || !protos["UDP"] || !protos["UNIX-STREAM"] {
			t.Errorf("protocols %v, want TCP, UDP and UNIX-STREAM", protos)
		}
		if got := tt.String(); !strings.HasPrefix(got, "epoll set of 3 descriptors: fd ") || !strings.Contains(got, "(server)") {
			t.Errorf("%q", got)
		}
	})
	t.Run("not accepted", func(t *testing.T) {
		tt := res.Targets[fds["backlog"]]
		if s := tt.Socket; s == nil || !s.NotAccepted || len(tt.Peers) != 1 || tt.Peers[0].PID != w.pids["backlog"] {
			t.Fatalf("socket %+v, peers %+v: want not accepted by pid %d", tt.Socket, tt.Peers, w.pids["backlog"])
		}
		want := fmt.Sprintf(" — not yet accepted by pid %d (backlog), sleeping", w.pids["backlog"])
		if got := tt.String(); !strings.HasPrefix(got, fmt.Sprintf("TCP 127.0.0.1:%d (ESTABLISHED", w.backlogPort)) || !strings.HasSuffix(got, want) {
			t.Errorf("%q, want …%q", got, want)
		}
	})
	t.Run("unix not accepted", func(t *testing.T) {
		want := "UNIX stream socket connected to a socket no process holds (not accepted yet, or closed) (CONNECTED, 0 bytes queued)"
		if got := res.Targets[fds["unixbacklog"]].String(); got != want {
			t.Errorf("%q, want %q", got, want)
		}
	})
	t.Run("unix", func(t *testing.T) {
		tt := res.Targets[fds["unix"]]
		s := tt.Socket
		if s == nil || !s.Found || s.State != "CONNECTED" || s.Type != "stream" || s.PeerName != w.sock {
			t.Fatalf("socket %+v, want connected to %s", s, w.sock)
		}
		if len(tt.Peers) != 1 || tt.Peers[0].PID != w.pids["unixpeer"] {
			t.Fatalf("peers %+v, want unixpeer, pid %d", tt.Peers, w.pids["unixpeer"])
		}
		want := fmt.Sprintf("UNIX stream socket connected to %s (CONNECTED, 0 bytes queued) — pid %d (unixpeer), sleeping", w.sock, w.pids["unixpeer"])
		if got := tt.String(); got != want {
			t.Errorf("%q, want %q", got, want)
		}
	})
}

// TestOtherNetns: a target in a network namespace of its own is read in
// it: its tables are not the host's, and sock_diag is asked from a socket
// made in its namespace (setns on a locked OS thread).
func TestOtherNetns(t *testing.T) {
	unshare := testutil.RequireTool(t, "unshare")
	ip := testutil.RequireTool(t, "ip")
	w := startWaitsCmd(t, func(name string, args ...string) *exec.Cmd {
		script := ip + ` link set lo up && exec "$0" "$@"`
		return exec.Command(unshare, append([]string{"--net", "/bin/sh", "-c", script, name}, args...)...)
	})
	if same, err := sameNetns(w.Pid); err != nil || same {
		t.Fatalf("the target shares our network namespace (%v)", err)
	}
	tcp := w.blockedFD(t, w.tids["tcp"], "recvfrom")
	unixFD := w.blockedFD(t, w.tids["unix"], "read")
	w.settle(t, false)
	res := Resolve(w.Pid, []int{tcp, unixFD}, Options{})
	for _, n := range res.Notes {
		t.Logf("note: %s", n)
	}
	if got := res.Targets[tcp]; got.Socket == nil || !got.Socket.Found || len(got.Peers) != 1 || got.Peers[0].PID != w.pids["server"] {
		t.Errorf("TCP in the target's namespace: %s (%+v)", got, got.Socket)
	}
	if got := res.Targets[unixFD]; got.Socket == nil || got.Socket.PeerName != w.sock || len(got.Peers) != 1 || got.Peers[0].PID != w.pids["unixpeer"] {
		t.Errorf("UNIX socket through sock_diag in the target's namespace: %s (%+v)", got, got.Socket)
	}
	// The thread that entered the namespace came back: every thread of
	// this process is in the process's own.
	own, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, e := range tasks {
		if ns, err := os.Readlink("/proc/self/task/" + e.Name() + "/ns/net"); err == nil && ns != own {
			t.Errorf("thread %s is in %s, not the process's %s", e.Name(), ns, own)
		}
	}
}

// TestKinds: descriptors of each kind, made in this process, named with
// their settings as the kernel reports them.
func TestKinds(t *testing.T) {
	efd, err := unix.Eventfd(3, unix.EFD_SEMAPHORE|unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	tfd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tfd)
	spec := unix.ItimerSpec{Interval: unix.NsecToTimespec(int64(2 * time.Second)), Value: unix.NsecToTimespec(int64(time.Hour))}
	if err := unix.TimerfdSettime(tfd, 0, &spec, nil); err != nil {
		t.Fatal(err)
	}
	var set unix.Sigset_t
	set.Val[0] = 1<<(unix.SIGUSR1-1) | 1<<(unix.SIGHUP-1)
	sfd, err := unix.Signalfd(-1, &set, unix.SFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sfd)
	name := filepath.Join(t.TempDir(), "data\nfile")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	pfd, err := unix.PidfdOpen(os.Getppid(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	// An epoll set holding a descriptor since closed (a dup keeps the
	// registration alive) and whose number now names another file.
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ep)
	gone, keep := mustPipe(t)
	defer unix.Close(keep)
	dup, err := unix.Dup(gone)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	for _, fd := range []int{gone, efd} {
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			t.Fatal(err)
		}
	}
	unix.Close(gone)
	reused, keep2 := mustPipe(t) // most likely gets the number back
	defer unix.Close(reused)
	defer unix.Close(keep2)

	res := Resolve(os.Getpid(), []int{efd, tfd, sfd, int(f.Fd()), pfd, ep}, Options{})
	tests := []struct {
		fd   int
		kind Kind
		want string
	}{
		{efd, KindEventfd, "eventfd (count 3, semaphore)"},
		{tfd, KindTimerfd, "timerfd on CLOCK_MONOTONIC, next in 1h0m0s, every 2s"},
		{sfd, KindSignalfd, "signalfd for SIGHUP, SIGUSR1"},
		{pfd, KindPidfd, fmt.Sprintf("pidfd of pid %d", os.Getppid())},
	}
	for _, tt := range tests {
		got := res.Targets[tt.fd]
		if got.Kind != tt.kind || got.String() != tt.want {
			t.Errorf("fd %d: %s %q, want %s %q", tt.fd, got.Kind, got.String(), tt.kind, tt.want)
		}
	}
	file := res.Targets[int(f.Fd())]
	wantFile := strings.ReplaceAll(name, "\n", `\x0a`) + " at offset 4096 on "
	if file.Kind != KindFile || file.Path != name || file.Pos != 4096 || file.Device == "" || !strings.HasPrefix(file.String(), wantFile) {
		t.Errorf("file: %+v %q, want %q… (the newline escaped)", file, file.String(), wantFile)
	}
	e := res.Targets[ep]
	if e.Epoll.Count != 2 || len(e.Epoll.Items) != 2 {
		t.Fatalf("epoll %+v", e.Epoll)
	}
	for _, it := range e.Epoll.Items {
		if want := it.FD == gone; it.Closed != want {
			t.Errorf("item fd %d → %s: closed %v, want %v", it.FD, it.Target, it.Closed, want)
		}
	}
}

func mustPipe(t *testing.T) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	return p[0], p[1]
}
