package snapshot

import (
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// asleepThreads are the threads of testdata/asleep and the functions
// their stacks hold, innermost first.
var asleepThreads = []struct {
	key   string
	stack []string
}{
	{"cond", []string{"wait_cond", "sleeper"}},
	{"mutex", []string{"wait_mutex", "sleeper"}},
	{"read", []string{"wait_read", "sleeper"}},
	{"sleep", []string{"wait_sleep", "sleeper"}},
	{"epoll", []string{"wait_epoll", "sleeper"}},
}

// asleepTarget starts testdata/asleep built with the flags given and
// waits for each of its threads to sleep in its system call.
func asleepTarget(t *testing.T, flags ...string) (*testutil.Target, map[string]int) {
	t.Helper()
	testutil.RequirePtrace(t)
	tg := testutil.Start(t, testutil.BuildC(t, "asleep/asleep.c", flags...))
	ids := readyLine(t, tg.WaitLine(t, "ready ", 10*time.Second))
	for _, th := range asleepThreads {
		waitAsleep(t, tg.Pid, ids[th.key])
	}
	return tg, ids
}

// waitAsleep waits until tid sleeps in a system call.
func waitAsleep(t *testing.T, pid, tid int) {
	t.Helper()
	err := testutil.Eventually(10*time.Second, func() bool {
		st, err := procfs.ReadStatus(pid, tid)
		if err != nil || st.State != 'S' {
			return false
		}
		sc, err := procfs.ReadSyscall(pid, tid)
		return err == nil && asleepInSyscall(st, sc)
	})
	if err != nil {
		t.Fatalf("thread %d never slept in a system call", tid)
	}
}

// TestAsleepSameAsStopped: threads asleep in futex (a condition
// variable, a mutex), read, nanosleep and epoll_wait are read without a
// stop, and their stacks are those the ptrace stop gives the same
// threads, frame for frame. Built without frame pointers every such
// thread is read without a stop; built with them, a thread whose walk
// needs the frame pointer /proc does not show (no callee saved it) is
// stopped, and has the same stack either way. A stopped thread's walk,
// made in its copy after the stop, is the one made under the stop.
func TestAsleepSameAsStopped(t *testing.T) {
	t.Parallel() // tests that set testHookAsleep are not parallel
	for _, c := range []struct {
		name  string
		flags []string
	}{{"no-frame-pointers", []string{"-fomit-frame-pointer"}}, {"frame-pointers", nil}} {
		t.Run(c.name, func(t *testing.T) {
			tg, ids := asleepTarget(t, c.flags...)
			asleep := take(t, tg.Pid, Options{})
			stopped := take(t, tg.Pid, Options{stopSleepers: true})
			walkedStopped := take(t, tg.Pid, Options{stopSleepers: true, walkStopped: true})
			unstopped := 0
			for _, th := range asleepThreads {
				a, s := threadOf(t, asleep, ids[th.key]), threadOf(t, stopped, ids[th.key])
				if !s.Stopped {
					t.Fatalf("%s: the reference was not read under a stop (%v)", th.key, s.Err)
				}
				if !a.Stopped {
					unstopped++
				} else if c.flags != nil {
					t.Errorf("%s: stopped (by %s), built without frame pointers: want it read without a stop", th.key, a.Unwinder)
				}
				if !hasInOrder(userNames(a), th.stack...) {
					t.Errorf("%s: stack %v (by %s, stopped %v), want %v in order", th.key, userNames(a), a.Unwinder, a.Stopped, th.stack)
				}
				if w := threadOf(t, walkedStopped, ids[th.key]); !slices.Equal(w.UserAddrs, s.UserAddrs) || w.UserCut != s.UserCut {
					t.Errorf("%s: walked after its stop: %x cut %v; walked under it: %x cut %v", th.key, s.UserAddrs, s.UserCut, w.UserAddrs, w.UserCut)
				}
				if !slices.Equal(a.UserAddrs, s.UserAddrs) || a.UserCut != s.UserCut {
					t.Errorf("%s: read without a stop (%s, stopped %v): %x cut %v; under a stop: %x cut %v",
						th.key, a.Unwinder, a.Stopped, a.UserAddrs, a.UserCut, s.UserAddrs, s.UserCut)
				}
			}
			t.Logf("%d of %d threads read without a stop", unstopped, len(asleepThreads))
			if unstopped == 0 {
				t.Error("every sleeping thread was stopped")
			}
			assertReleased(t, tg.Pid)
		})
	}
}

// TestAsleepWokeIsStopped: a thread that runs between the reads that
// prove it asleep — woken by a signal, it runs its handler and sleeps
// again in the same read(), with the same syscall line — is found out
// and read under a stop instead, with the stack it has; the others are
// read without one.
func TestAsleepWokeIsStopped(t *testing.T) {
	tg, ids := asleepTarget(t, "-fomit-frame-pointer")
	reader := ids["read"]
	before, err := procfs.ReadSyscall(tg.Pid, reader)
	if err != nil {
		t.Fatal(err)
	}
	var woken atomic.Bool
	testHookAsleep = func(tid int) {
		if tid != reader || woken.Swap(true) {
			return
		}
		ss, _ := procfs.ReadSchedstat(tg.Pid, tid)
		if err := syscall.Tgkill(tg.Pid, tid, syscall.SIGUSR1); err != nil {
			t.Errorf("tgkill: %v", err)
			return
		}
		// Until it has run its handler and sleeps in read() again.
		err := testutil.Eventually(10*time.Second, func() bool {
			now, err1 := procfs.ReadSchedstat(tg.Pid, tid)
			sc, err2 := procfs.ReadSyscall(tg.Pid, tid)
			return err1 == nil && err2 == nil && now.Slices > ss.Slices && sc == before
		})
		if err != nil {
			t.Errorf("thread %d did not sleep again in the same read()", tid)
		}
	}
	defer func() { testHookAsleep = nil }()
	snap := take(t, tg.Pid, Options{})
	if !woken.Load() {
		t.Fatal("the reader was not read as asleep")
	}
	for _, th := range asleepThreads {
		got := threadOf(t, snap, ids[th.key])
		if want := th.key == "read"; got.Stopped != want {
			t.Errorf("%s: stopped %v, want %v", th.key, got.Stopped, want)
		}
		if !hasInOrder(userNames(got), th.stack...) {
			t.Errorf("%s: stack %v, want %v in order", th.key, userNames(got), th.stack)
		}
	}
	assertReleased(t, tg.Pid)
}

// TestWchanFromStack: the wchan a snapshot gives each sleeping thread,
// taken from its kernel stack's first frame, is what the kernel's wchan
// file says.
func TestWchanFromStack(t *testing.T) {
	t.Parallel()            // tests that set testHookAsleep are not parallel
	testutil.RequireRoot(t) // the kernel stack needs CAP_SYS_ADMIN
	tg, ids := asleepTarget(t, "-fomit-frame-pointer")
	snap := take(t, tg.Pid, Options{})
	for _, th := range asleepThreads {
		got := threadOf(t, snap, ids[th.key])
		want, err := procfs.Wchan(tg.Pid, ids[th.key])
		if err != nil {
			t.Fatal(err)
		}
		if got.Wchan != want || want == "" {
			t.Errorf("%s: wchan %q, the kernel's file says %q", th.key, got.Wchan, want)
		}
	}
}
