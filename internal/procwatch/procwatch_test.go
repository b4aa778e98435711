package procwatch

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

func TestContainerOf(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct {
		cgroup, container, pod string
	}{
		{"/user.slice/user-0.slice/session-1.scope", "", ""},
		{"/docker/" + id, id, ""},
		{"/system.slice/docker-" + id + ".scope", id, ""},
		{"/kubepods/burstable/pod1b2c3d4e-0000-4111-8222-333344445555/" + id, id, "1b2c3d4e-0000-4111-8222-333344445555"},
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_0000_4111_8222_333344445555.slice/cri-containerd-" + id + ".scope",
			id, "1b2c3d4e-0000-4111-8222-333344445555"},
		{"/kubepods.slice/kubepods-pod1b2c3d4e_0000_4111_8222_333344445555.slice/crio-" + id + ".scope", id, "1b2c3d4e-0000-4111-8222-333344445555"},
		{"/machine.slice/libpod-" + id + ".scope/container", id, ""},
		{"/docker/" + id[:63], "", ""}, // one digit short
	} {
		c2, p := ContainerOf(c.cgroup)
		if c2 != c.container || p != c.pod {
			t.Errorf("ContainerOf(%q) = %q, %q; want %q, %q", c.cgroup, c2, p, c.container, c.pod)
		}
	}
}

func TestParseCgroup(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"0::/system.slice/cron.service\n", "/system.slice/cron.service"},
		{"12:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n", "/"},
		{"12:memory:/docker/abc\n1:name=systemd:/docker/abc\n", "/docker/abc"},
		{"garbage\n3:cpu\n", ""},
	} {
		if got := ParseCgroup([]byte(c.file)); got != c.want {
			t.Errorf("ParseCgroup(%q) = %q, want %q", c.file, got, c.want)
		}
	}
}

func TestRead(t *testing.T) {
	// An argument sleep accepts (GNU sleep exits at once on one it does
	// not, and a test that read it then saw a zombie).
	tg := testutil.Start(t, "/bin/sleep", "1000.125")
	f, err := Read(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if f.PID != tg.Pid || f.Start == 0 || f.Comm != "sleep" || f.UID != os.Geteuid() {
		t.Errorf("facts %+v", f)
	}
	if got := f.CommandLine(); got != "/bin/sleep 1000.125" {
		t.Errorf("command line %q", got)
	}
	if exe, _ := os.Readlink("/proc/self/exe"); f.Exe == "" || f.Exe == exe {
		t.Errorf("exe %q", f.Exe)
	}
	self, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if f.Cgroup != self.Cgroup {
		t.Errorf("cgroup %q, ours %q: a child shares its parent's", f.Cgroup, self.Cgroup)
	}
	pids, err := List()
	if err != nil || !slices.Contains(pids, tg.Pid) || !slices.Contains(pids, os.Getpid()) {
		t.Errorf("List: %v, missing %d or ourselves", err, tg.Pid)
	}
	_ = tg.Cmd.Process.Kill()
	<-tg.Done()
	if _, err := Read(tg.Pid); err == nil {
		t.Errorf("Read of a reaped process succeeded")
	}
}

// TestConnector runs a program and waits for the kernel to announce its
// exec and its exit.
func TestConnector(t *testing.T) {
	testutil.RequireRoot(t)
	c, err := Listen()
	if err != nil {
		testutil.Skip(t, "the process connector needs CAP_NET_ADMIN in the host's namespaces: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := make(chan Event, 1024)
	done := make(chan error, 1)
	go func() {
		done <- c.Run(ctx, func(ev Event) {
			select {
			case events <- ev:
			default:
			}
		}, func() {})
	}()
	cmd := exec.Command("/bin/true")
	if err := testutil.StartProcess(cmd); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	_ = cmd.Wait()
	var sawExec, sawExit bool
	for !sawExec || !sawExit {
		select {
		case ev := <-events:
			if ev.PID == pid {
				sawExec = sawExec || !ev.Exit
				sawExit = sawExit || ev.Exit
			}
		case <-ctx.Done():
			t.Fatalf("pid %d: exec seen %v, exit seen %v", pid, sawExec, sawExit)
		}
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("Run after cancel: %v", err)
	}
}

// TestConnectorBatches: RunBatches at a pace reports every exec that
// came meanwhile, the ones after a quiet spell too (its wait for the
// next event, in poll(2)), and Close ends it while it waits.
func TestConnectorBatches(t *testing.T) {
	testutil.RequireRoot(t)
	c, err := ListenExec()
	if err != nil {
		testutil.Skip(t, "the process connector needs CAP_NET_ADMIN in the host's namespaces: %v", err)
	}
	execs := make(chan []int, 1024)
	done := make(chan error, 1)
	go func() {
		done <- c.RunBatches(context.Background(), 100*time.Millisecond, func(evs []Event) {
			var pids []int
			for _, ev := range evs {
				pids = append(pids, ev.PID)
			}
			execs <- pids
		}, func() {})
	}()
	run := func(n int) map[int]bool {
		want := map[int]bool{}
		for range n {
			cmd := exec.Command("/bin/true")
			if err := testutil.StartProcess(cmd); err != nil {
				t.Fatal(err)
			}
			want[cmd.Process.Pid] = true
			_ = cmd.Wait()
		}
		return want
	}
	await := func(what string, want map[int]bool) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for len(want) > 0 {
			select {
			case pids := <-execs:
				for _, p := range pids {
					delete(want, p)
				}
			case <-timeout:
				t.Fatalf("%s: the execs of %v never reported", what, want)
			}
		}
	}
	await("a burst", run(20))
	// Quiet (the host's own execs aside) for longer than the pace: the
	// next exec comes to a reader waiting in poll.
	time.Sleep(300 * time.Millisecond) // a quiet spell, not synchronization
	await("after a quiet spell", run(1))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("RunBatches after Close: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("RunBatches did not return after Close")
	}
	if err := c.SetForkParents([]int{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("SetForkParents after Close: %v, want ErrClosed", err)
	}
}

func FuzzParseEvents(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 16+20+24))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, ev := range ParseEvents(b) {
			if ev.PID <= 0 {
				t.Fatalf("event with pid %d", ev.PID)
			}
		}
	})
}

// TestConnectorFilter: the kernel hands the socket only the events asked
// for. A shell that forks a subshell (a fork and exit with no exec) and
// runs a program (a fork, an exec and an exit) is watched, with whatever
// else the host does meanwhile: every datagram that arrives is an exec
// (ListenExec), or an exec or a process's exit (Listen).
func TestConnectorFilter(t *testing.T) {
	testutil.RequireRoot(t)
	for _, exits := range []bool{false, true} {
		c, err := listen(exits)
		if err != nil {
			testutil.Skip(t, "the process connector needs CAP_NET_ADMIN in the host's namespaces: %v", err)
		}
		cmd := exec.Command("/bin/sh", "-c", "(:); exec /bin/true")
		if err := testutil.StartProcess(cmd); err != nil {
			t.Fatal(err)
		}
		sh := cmd.Process.Pid
		_ = cmd.Wait()
		// The shell's last event: its exit, or without exits its second
		// exec (of /bin/true in its place), after its subshell's.
		sawShellEnd, shellExecs := false, 0
		rb := newRecvBatch()
		deadline := time.Now().Add(30 * time.Second)
		for !sawShellEnd && time.Now().Before(deadline) {
			fds := []unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN}}
			if ready, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds())+1); ready == 0 || err != nil && err != unix.EINTR {
				break
			}
			n, errno := rb.recv(uintptr(c.fd))
			if errno == unix.EAGAIN || errno == unix.EINTR {
				continue
			}
			if errno != 0 {
				t.Fatalf("exits %v: recvmmsg: %v", exits, errno)
			}
			for i := range n {
				msg := rb.datagram(i)
				if len(msg) < tgidAt+4 {
					t.Errorf("exits %v: a short datagram passed the filter: % x", exits, msg)
					continue
				}
				what := binary.NativeEndian.Uint32(msg[whatAt:])
				pid := int(int32(binary.NativeEndian.Uint32(msg[pidAt:])))
				tgid := int(int32(binary.NativeEndian.Uint32(msg[tgidAt:])))
				switch {
				case what == procEventExec:
				case exits && what == procEventExit && pid == tgid:
				default:
					t.Errorf("exits %v: event %#x of pid %d (tgid %d) passed the filter", exits, what, pid, tgid)
				}
				if tgid == sh && what == procEventExec {
					shellExecs++
				}
				if tgid == sh && (what == procEventExit || (!exits && shellExecs == 2)) {
					sawShellEnd = true
				}
			}
		}
		c.Close()
		if !sawShellEnd {
			t.Errorf("exits %v: the shell's last event never came", exits)
		}
	}
}

// TestConnectorForks: a process that forks without executing (a prefork
// server's workers) is reported at once when its parent is one asked
// for, and the host's other forks and threads are not.
func TestConnectorForks(t *testing.T) {
	testutil.RequireRoot(t)
	c, err := ListenExec()
	if err != nil {
		testutil.Skip(t, "the process connector needs CAP_NET_ADMIN in the host's namespaces: %v", err)
	}
	defer c.Close()
	py := testutil.RequireTool(t, "/usr/bin/python3")
	// The parent forks two workers when told to, and a thread.
	cmd := exec.Command(py, "-c", `
import os, sys, threading, time
print("ready", flush=True)
sys.stdin.readline()
kids = []
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        os.closerange(0, 3)
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("workers", *kids, flush=True)
time.sleep(60)
`)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 20*time.Second)
	other := exec.Command("/bin/sh", "-c", "(:)") // a fork of a parent not asked for
	if err := c.SetForkParents([]int{tg.Pid}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := make(chan Event, 1024)
	go c.Run(ctx, func(ev Event) {
		select {
		case events <- ev:
		default:
		}
	}, func() {})
	if err := testutil.StartProcess(other); err != nil {
		t.Fatal(err)
	}
	_ = other.Wait()
	fmt.Fprintln(in)
	var kids []int
	for _, f := range strings.Fields(strings.TrimPrefix(tg.WaitLine(t, "workers ", 20*time.Second), "workers ")) {
		n, _ := strconv.Atoi(f)
		kids = append(kids, n)
		t.Cleanup(func() { _ = syscall.Kill(n, syscall.SIGKILL) })
	}
	seen := map[int]bool{}
	for len(seen) < len(kids) {
		select {
		case ev := <-events:
			if !ev.Fork {
				continue
			}
			if ev.Parent != tg.Pid {
				t.Errorf("a fork of pid %d, not asked for, reported: %+v", ev.Parent, ev)
			}
			if !slices.Contains(kids, ev.PID) {
				t.Errorf("fork event for pid %d: not a worker %v (a thread?)", ev.PID, kids)
			}
			seen[ev.PID] = true
		case <-ctx.Done():
			t.Fatalf("workers %v: forks seen %v", kids, seen)
		}
	}
}
