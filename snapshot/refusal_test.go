package snapshot

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// TestMainThreadExited: a process whose main thread left through
// pthread_exit lives on with a zombie leader, whose own maps are empty.
// The snapshot reads it through a live thread: it is not "exited", and
// the live threads' frames are named.
func TestMainThreadExited(t *testing.T) {
	testutil.RequirePtrace(t)
	tg := testutil.Start(t, buildC(t, "mainexit/mainexit.c"))
	ids := readyLine(t, tg.WaitLine(t, "ready ", 10*time.Second))
	if err := testutil.Eventually(10*time.Second, func() bool {
		st, err := procfs.ReadStat(tg.Pid, tg.Pid)
		return err == nil && st.State == 'Z'
	}); err != nil {
		t.Fatal("the main thread never became a zombie")
	}
	waitBlocked(t, tg.Pid, ids["waiter"], 34) // pause
	for _, noPtrace := range []bool{false, true} {
		snap := take(t, tg.Pid, Options{NoPtrace: noPtrace})
		if snap.TargetExited {
			t.Errorf("no ptrace %v: the process is said to have exited; notes %q", noPtrace, snap.Notes)
		}
		if w := threadOf(t, snap, ids["waiter"]); !hasInOrder(userNames(w), "wait_in_worker", "waiter", "start_thread") {
			t.Errorf("no ptrace %v: waiter's stack %v (%s, %v)", noPtrace, userNames(w), w.Unwinder, w.Err)
		}
		if !noPtrace {
			if s := threadOf(t, snap, ids["spinner"]); !s.Stopped || !hasInOrder(userNames(s), "spin_in_worker", "spinner") {
				t.Errorf("spinner's stack under a stop: %v (stopped %v, %v)", userNames(s), s.Stopped, s.Err)
			}
		}
		for _, th := range snap.Threads {
			for _, l := range th.User {
				if strings.HasPrefix(l.Name(), "[unknown]") {
					t.Errorf("no ptrace %v: thread %d has an unknown frame %s", noPtrace, th.TID, l.Name())
				}
			}
		}
	}
	assertReleased(t, tg.Pid)
}

// TestOwnProcess: stallwatch cannot ptrace its own threads; the snapshot
// says so truly (not as a missing capability) and reads them without stops.
func TestOwnProcess(t *testing.T) {
	snap := take(t, os.Getpid(), Options{})
	if !errors.Is(snap.PtraceErr, model.ErrOwnProcess) {
		t.Errorf("PtraceErr %v, want ErrOwnProcess", snap.PtraceErr)
	}
	var pe *perms.Error
	if errors.As(snap.PtraceErr, &pe) || snap.PtraceUsed {
		t.Errorf("own process: PtraceErr %v (a permission error: %v), PtraceUsed %v", snap.PtraceErr, pe != nil, snap.PtraceUsed)
	}
	if len(snap.Threads) == 0 {
		t.Fatal("no threads")
	}
}

// TestKernelThread: a kernel thread has no user space: the snapshot says
// that, not that a capability is missing.
func TestKernelThread(t *testing.T) {
	testutil.RequireRoot(t)
	kthread := 0
	for _, pid := range []int{2, 3, 4} {
		if st, err := procfs.ReadStat(pid, pid); err == nil && st.KernelThread() {
			kthread = pid
			break
		}
	}
	if kthread == 0 {
		testutil.Skip(t, "no kernel thread among pids 2-4")
	}
	snap := take(t, kthread, Options{})
	if !errors.Is(snap.PtraceErr, model.ErrKernelThread) {
		t.Errorf("PtraceErr %v, want ErrKernelThread", snap.PtraceErr)
	}
	if snap.PtraceErr != nil && strings.Contains(snap.PtraceErr.Error(), "CAP_SYS_PTRACE") {
		t.Errorf("kernel thread blamed on a capability: %v", snap.PtraceErr)
	}
}

// TestPidOne: whatever pid 1 allows, the reason given when a stop is
// refused is the true one: as root with CAP_SYS_PTRACE, never "missing
// CAP_SYS_PTRACE (the target belongs to another user)".
func TestPidOne(t *testing.T) {
	testutil.RequireRoot(t)
	snap := take(t, 1, Options{})
	if snap.PtraceUsed {
		return // this machine lets root stop pid 1: nothing to explain
	}
	var re *model.RefusedError
	if !errors.As(snap.PtraceErr, &re) || !strings.Contains(re.Why, "pid 1") {
		t.Errorf("PtraceErr %v, want a RefusedError naming pid 1", snap.PtraceErr)
	}
	if snap.PtraceErr != nil && strings.Contains(snap.PtraceErr.Error(), "another user") {
		t.Errorf("pid 1 blamed on another user as root: %v", snap.PtraceErr)
	}
	assertReleased(t, 1)
}

// TestTracedThread: a thread that strace holds is read without a stop and
// says why; the process's other threads are stopped as usual.
func TestTracedThread(t *testing.T) {
	testutil.RequirePtrace(t)
	strace := testutil.RequireTool(t, "strace")
	tg, ids := deadlockTarget(t)
	traced := ids["a"]
	st := exec.Command(strace, "-q", "-o", "/dev/null", "-p", strconv.Itoa(traced))
	if err := st.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		st.Process.Signal(os.Interrupt)
		st.Wait()
		assertReleased(t, tg.Pid)
	}()
	if err := testutil.Eventually(10*time.Second, func() bool {
		s, err := procfs.ReadStatus(tg.Pid, traced)
		return err == nil && s.TracerPid == st.Process.Pid
	}); err != nil {
		t.Fatal("strace never attached")
	}
	snap := take(t, tg.Pid, Options{stopSleepers: true})
	if snap.PtraceErr != nil || !snap.PtraceUsed {
		t.Errorf("one traced thread cost the whole snapshot its stops: PtraceErr %v, PtraceUsed %v", snap.PtraceErr, snap.PtraceUsed)
	}
	th := threadOf(t, snap, traced)
	var te *model.TracedError
	if !errors.As(th.Err, &te) || te.Tracer != st.Process.Pid || te.TracerName != "strace" {
		t.Errorf("traced thread's Err %v, want a TracedError naming strace (pid %d)", th.Err, st.Process.Pid)
	}
	if th.Stopped || len(th.User) < 3 {
		t.Errorf("traced thread: stopped %v, %d user frames; want read without a stop", th.Stopped, len(th.User))
	}
	if other := threadOf(t, snap, ids["b"]); !other.Stopped {
		t.Errorf("thread %d was not stopped: %v", ids["b"], other.Err)
	}
}
