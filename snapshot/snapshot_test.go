package snapshot

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

var sharedDir string

func TestMain(m *testing.M) {
	if helperMain() {
		return
	}
	var err error
	sharedDir, err = os.MkdirTemp("", "snapshot-test-")
	if err != nil {
		panic(err)
	}
	testutil.Main(m, func() { os.RemoveAll(sharedDir) }, testutil.RemoveJavaClasses)
}

// deadlockTarget starts testdata/deadlock and waits until its three
// stuck threads sleep on their mutexes.
func deadlockTarget(t *testing.T) (*testutil.Target, map[string]int) {
	t.Helper()
	testutil.RequirePtrace(t)
	tg := testutil.Start(t, buildC(t, "deadlock/deadlock.c"))
	ids := readyLine(t, tg.WaitLine(t, "ready ", 10*time.Second))
	for _, k := range []string{"a", "b", "waiter"} {
		waitBlocked(t, tg.Pid, ids[k], sysFutex)
	}
	return tg, ids
}

// TestDeadlock: the snapshot finds the two deadlocked threads as a cycle,
// names the third thread's blocker, and shows each stuck thread's C
// functions beneath libc's pthread_mutex_lock (which has no frame
// pointers: the CFI unwinder finds them). After it the target still runs
// and no thread is stopped or traced.
func TestDeadlock(t *testing.T) {
	t.Parallel() // tests that set testHookStopped are not parallel
	for _, noPtrace := range []bool{false, true} {
		name := "ptrace"
		if noPtrace {
			name = "no-ptrace"
		}
		t.Run(name, func(t *testing.T) {
			started := time.Now()
			tg, ids := deadlockTarget(t)
			blocked := time.Now()
			time.Sleep(300 * time.Millisecond)
			least := time.Since(blocked)
			snap := take(t, tg.Pid, Options{NoPtrace: noPtrace})
			a, b, w := ids["a"], ids["b"], ids["waiter"]
			checkOffCPU(t, snap, []int{a, b, w}, least, time.Since(started))

			if len(snap.Locks.Cycles) != 1 || !sameSet(snap.Locks.Cycles[0], []int{a, b}) {
				t.Errorf("cycles %v, want one of {%d %d}", snap.Locks.Cycles, a, b)
			}
			wt := threadOf(t, snap, w)
			if wt.Wait == nil || wt.Wait.Owner != a || wt.Wait.Kind != "mutex" {
				t.Errorf("waiter's wait %+v, want the mutex held by worker-a (%d)", wt.Wait, a)
			}
			if !hasChain(snap.Locks.Chains, w, a) {
				t.Errorf("chains %v, want %d → %d", snap.Locks.Chains, w, a)
			}
			want := map[int][]string{
				a: {"take_b_while_holding_a", "worker_a"},
				b: {"take_a_while_holding_b", "worker_b"},
				w: {"wait_for_a", "waiter"},
			}
			for tid, fns := range want {
				th := threadOf(t, snap, tid)
				names := userNames(th)
				if !hasInOrder(names, append([]string{"~pthread_mutex_lock"}, fns...)...) {
					t.Errorf("thread %d (%s) user stack %v (by %s), want pthread_mutex_lock then %v", tid, th.Name, names, th.Unwinder, fns)
				}
				if th.Stopped == noPtrace {
					t.Errorf("thread %d: Stopped %v with NoPtrace %v", tid, th.Stopped, noPtrace)
				}
				if len(th.Kernel) == 0 || !strings.Contains(th.Kernel[0].Name(), "futex") && !strings.Contains(kernelNames(th), "futex") {
					t.Errorf("thread %d kernel stack %q, want a futex wait", tid, kernelNames(th))
				}
			}
			// The main thread joins worker-a.
			if mt := threadOf(t, snap, tg.Pid); mt.Wait == nil || mt.Wait.Kind != "join" || mt.Wait.Owner != a {
				t.Errorf("main thread wait %+v, want a join of worker-a (%d)", mt.Wait, a)
			}
			if snap.PtraceUsed == noPtrace {
				t.Errorf("PtraceUsed %v with NoPtrace %v", snap.PtraceUsed, noPtrace)
			}
			t.Logf("%d threads in %v, longest stop %v", len(snap.Threads), snap.Duration, snap.MaxStop)
			assertReleased(t, tg.Pid)
			assertProgress(t, tg)
		})
	}
}

// checkOffCPU: threads blocked for at least min and at most max are
// reported off the CPU for that long, from the kernel's accounting where
// it exists.
func checkOffCPU(t *testing.T, snap *model.Snapshot, tids []int, min, max time.Duration) {
	t.Helper()
	if !hasSchedFile(snap.PID) {
		if !strings.Contains(strings.Join(snap.Notes, "\n"), "off the CPU is unknown") {
			t.Errorf("no sched file and no note saying off-CPU time is unknown: %q", snap.Notes)
		}
		return
	}
	for _, tid := range tids {
		th := threadOf(t, snap, tid)
		slack := 50 * time.Millisecond
		if !th.OffCPUKnown || th.OffCPUSource != "sched" || th.OffCPUFor < min-slack || th.OffCPUFor > max+slack {
			t.Errorf("thread %d off CPU %v (known %v, from %q), want between %v and %v from sched", tid, th.OffCPUFor, th.OffCPUKnown, th.OffCPUSource, min, max)
		}
	}
}

func kernelNames(th *model.Thread) string {
	var s []string
	for _, l := range th.Kernel {
		s = append(s, l.Name())
	}
	return strings.Join(s, " ")
}

func sameSet(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[int]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

func hasChain(chains [][]int, want ...int) bool {
	for _, c := range chains {
		if len(c) == len(want) {
			ok := true
			for i := range c {
				ok = ok && c[i] == want[i]
			}
			if ok {
				return true
			}
		}
	}
	return false
}
