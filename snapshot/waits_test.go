package snapshot

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestBlockedWaits: threads blocked in read() on a pipe and on a socket,
// in nanosleep, on a plain mutex and on a priority-inheritance mutex held
// by the socket reader, and inside a signal handler: each wait is said in
// words, both mutex waits lead to their owner, and the chains end at the
// owner "blocked in read() on fd N → UNIX stream socket … — this
// process (fd M)": the other ends of its pipe and socketpair are its own.
func TestBlockedWaits(t *testing.T) {
	t.Parallel() // tests that set testHookStopped are not parallel
	testutil.RequirePtrace(t)
	tg := testutil.Start(t, buildC(t, "blocked/blocked.c"))
	ids := readyLine(t, tg.WaitLine(t, "ready ", 10*time.Second))
	waitBlocked(t, tg.Pid, ids["sleeper"], sysClockNanosleep)
	waitBlocked(t, tg.Pid, ids["reader"], sysRead)
	waitBlocked(t, tg.Pid, ids["holder"], sysRead)
	waitBlocked(t, tg.Pid, ids["locker"], sysFutex)
	waitBlocked(t, tg.Pid, ids["piwaiter"], sysFutex)
	waitBlocked(t, tg.Pid, ids["signaled"], sysClockNanosleep)

	snap := take(t, tg.Pid, Options{})
	holder := ids["holder"]
	checks := []struct {
		who   string
		kind  string
		owner int
		desc  string // regexp
		stack []string
	}{
		{"reader", "fd", 0, `^read\(\) on fd \d+ → pipe:\[\d+\] written by this process \(fd \d+\)$`, []string{"read_inner", "read_outer", "reader"}},
		{"holder", "fd", 0, `^read\(\) on fd \d+ → UNIX stream socket connected to an unnamed socket \(CONNECTED, 0 bytes queued\) — this process \(fd \d+\)$`, []string{"read_inner", "read_outer", "hold_inner", "hold_outer", "holder"}},
		{"sleeper", "sleep", 0, `^a timeout: clock_nanosleep\(27h46m40s\)$`, []string{"sleep_inner", "sleep_outer", "sleeper"}},
		{"locker", "mutex", holder, `^pthread mutex 0x[0-9a-f]+ held by tid \d+$`, []string{"~pthread_mutex_lock", "lock_inner", "lock_outer", "locker"}},
		{"piwaiter", "pi-mutex", holder, `^PI mutex 0x[0-9a-f]+ held by tid \d+$`, []string{"~pthread_mutex_lock", "lock_inner", "pi_inner", "pi_outer", "piwaiter"}},
		{"signaled", "sleep", 0, `nanosleep`, []string{"sleep_inner", "handler_sleep", "on_signal", "~restore_rt", "sig_outer", "signaled"}},
	}
	for _, c := range checks {
		th := threadOf(t, snap, ids[c.who])
		if th.Wait == nil {
			t.Errorf("%s: no wait", c.who)
			continue
		}
		if th.Wait.Kind != c.kind || th.Wait.Owner != c.owner || !regexp.MustCompile(c.desc).MatchString(th.Wait.Desc) {
			t.Errorf("%s: wait %+v, want kind %s owner %d desc ~ %s", c.who, *th.Wait, c.kind, c.owner, c.desc)
		}
		if names := userNames(th); !hasInOrder(names, c.stack...) {
			t.Errorf("%s: user stack %v (by %s), want %v in order", c.who, names, th.Unwinder, c.stack)
		}
		if th.Syscall == nil || th.Syscall.Desc == "" {
			t.Errorf("%s: no system call description", c.who)
		}
	}
	for _, who := range []string{"locker", "piwaiter"} {
		if !hasChain(snap.Locks.Chains, ids[who], holder) {
			t.Errorf("chains %v, want %s (%d) → holder (%d)", snap.Locks.Chains, who, ids[who], holder)
		}
	}
	if len(snap.Locks.Cycles) != 0 {
		t.Errorf("cycles %v in a process without a deadlock", snap.Locks.Cycles)
	}
	assertReleased(t, tg.Pid)
}

// TestWaitsOnOtherProcesses: threads blocked on descriptors whose other
// ends are other processes are said to wait on those processes, by pid
// and name, with what they are doing: a TCP connection to a server that
// never answers, a full pipe whose reader is stopped, an epoll set of
// three sockets, a UNIX socket to another process, a connection its
// listener never accepted.
func TestWaitsOnOtherProcesses(t *testing.T) {
	t.Parallel()
	testutil.RequirePtrace(t)
	sock := filepath.Join(t.TempDir(), "peer.sock")
	tg := testutil.Start(t, buildC(t, "waits/waits.c"), sock)
	ids := readyLine(t, tg.WaitLine(t, "ready ", 10*time.Second))
	if err := syscall.Kill(ids["logger"], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(ids["logger"], syscall.SIGCONT) })
	waitBlocked(t, tg.Pid, ids["tcp"], sysRecvfrom)
	waitBlocked(t, tg.Pid, ids["pipe"], sysWrite)
	waitBlocked(t, tg.Pid, ids["unix"], sysRead)
	waitBlocked(t, tg.Pid, ids["backlogtid"], sysRecvfrom)
	// The states the descriptions say: the peers asleep, the logger
	// stopped (SIGSTOP is taken asynchronously).
	for who, state := range map[string]byte{"server": 'S', "unixpeer": 'S', "backlog": 'S', "logger": 'T'} {
		if err := testutil.Eventually(20*time.Second, func() bool {
			st, err := procfs.ReadStat(ids[who], ids[who])
			return err == nil && st.State == state
		}); err != nil {
			t.Fatalf("%s (pid %d) never in state %c", who, ids[who], state)
		}
	}
	snap := take(t, tg.Pid, Options{})
	for _, n := range snap.Notes {
		t.Logf("note: %s", n)
	}
	checks := []struct {
		who, desc string // desc: a regexp of the Wait's
	}{
		{"tcp", fmt.Sprintf(`^recvfrom\(\) on fd \d+ → TCP 127\.0\.0\.1:%d \(ESTABLISHED, 0 bytes queued; from 127\.0\.0\.1:\d+\) — pid %d \(server\), sleeping$`, ids["port"], ids["server"])},
		{"pipe", fmt.Sprintf(`^write\(\) on fd \d+ → pipe:\[\d+\] read by pid %d \(logger\), which is stopped$`, ids["logger"])},
		{"epoll", fmt.Sprintf(`^epoll_p?wait\(\) on fd \d+ → epoll set of 3 descriptors: fd \d+ → .*TCP 127\.0\.0\.1:%d .*— pid %d \(server\)`, ids["port"], ids["server"])},
		{"unix", fmt.Sprintf(`^read\(\) on fd \d+ → UNIX stream socket connected to %s \(CONNECTED, 0 bytes queued\) — pid %d \(unixpeer\), sleeping$`, regexp.QuoteMeta(sock), ids["unixpeer"])},
		{"backlogtid", fmt.Sprintf(`^recvfrom\(\) on fd \d+ → TCP 127\.0\.0\.1:%d .* — not yet accepted by pid %d \(backlog\), sleeping$`, ids["backlogport"], ids["backlog"])},
	}
	for _, c := range checks {
		th := threadOf(t, snap, ids[c.who])
		if th.Wait == nil || !regexp.MustCompile(c.desc).MatchString(th.Wait.Desc) {
			t.Errorf("%s: wait %+v, want desc ~ %s", c.who, th.Wait, c.desc)
			continue
		}
		if th.Syscall == nil || !strings.Contains(th.Syscall.Desc, strings.SplitN(th.Wait.Desc, " → ", 2)[1]) {
			t.Errorf("%s: system call %+v does not say what the wait says", c.who, th.Syscall)
		}
	}
	// The same, as data: the other end's process by pid.
	peers := map[string]string{"tcp": "server", "pipe": "logger", "unix": "unixpeer", "backlogtid": "backlog"}
	for who, peer := range peers {
		on := threadOf(t, snap, ids[who]).Wait.On
		if on == nil || len(on.Peers) != 1 || on.Peers[0].PID != ids[peer] || on.Peers[0].Name != peer {
			t.Errorf("%s: wait on %+v, want its peer %s (pid %d)", who, on, peer, ids[peer])
		}
	}
	if on := threadOf(t, snap, ids["pipe"]).Wait.On; on == nil || on.Kind != "pipe" || on.Peers[0].State != "stopped" {
		t.Errorf("pipe: %+v, want a pipe read by a stopped process", on)
	}
	assertReleased(t, tg.Pid)
}
