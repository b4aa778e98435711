package snapshot

import (
	"regexp"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestBlockedWaits: threads blocked in read() on a pipe and on a socket,
// in nanosleep, on a plain mutex and on a priority-inheritance mutex held
// by the socket reader, and inside a signal handler: each wait is said in
// words, both mutex waits lead to their owner, and the chains end at the
// owner "blocked in read() on fd N → socket:[…]".
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
		{"reader", "fd", 0, `^read\(\) on fd \d+ → pipe:\[\d+\]$`, []string{"read_inner", "read_outer", "reader"}},
		{"holder", "fd", 0, `^read\(\) on fd \d+ → socket:\[\d+\]$`, []string{"read_inner", "read_outer", "hold_inner", "hold_outer", "holder"}},
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
