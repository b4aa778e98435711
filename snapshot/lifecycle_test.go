package snapshot

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestManyThreads: a process of 1,000 threads is snapshotted completely,
// every thread listed with its C function, and left running; threads
// asleep in a system call, as these are, are read without a stop, and
// with a stop each (the reference) they have the same stacks.
func TestManyThreads(t *testing.T) {
	t.Parallel() // tests that set testHookStopped are not parallel
	testutil.RequirePtrace(t)
	tg := testutil.Start(t, buildC(t, "manythreads/manythreads.c"), "1000")
	tg.WaitLine(t, "ready 1000", 30*time.Second)
	tids, err := procfs.Threads(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, stop := range []bool{false, true} {
		snap := take(t, tg.Pid, Options{stopSleepers: stop})
		if len(snap.Threads) != len(tids) || len(tids) != 1001 {
			t.Fatalf("%d threads in the snapshot, %d in /proc, want 1001", len(snap.Threads), len(tids))
		}
		stopped, named := 0, 0
		for i := range snap.Threads {
			th := &snap.Threads[i]
			if th.Stopped {
				stopped++
			}
			if hasInOrder(userNames(th), "idle_forever", "idler") {
				named++
			}
		}
		// With stops, a thread the scheduler does not run within
		// stopTimeout is read without one (and said so); on a loaded
		// machine that can happen to a few.
		switch {
		case named != 1000:
			t.Errorf("stop sleepers %v: %d threads named idle_forever → idler, want 1000", stop, named)
		case !stop && stopped != 0:
			t.Errorf("%d threads asleep in nanosleep were stopped, want none", stopped)
		case stop && stopped < 900:
			t.Errorf("%d threads stopped, want nearly all of the 1000", stopped)
		}
		t.Logf("stop sleepers %v: 1001 threads in %v, %d stopped, longest stop %v", stop, snap.Duration, stopped, snap.MaxStop)
	}
	assertReleased(t, tg.Pid)
}

// TestStoppedProcess: a process stopped by SIGSTOP is snapshotted and
// stays stopped (ptrace must not resume it); after SIGCONT it runs on.
func TestStoppedProcess(t *testing.T) {
	t.Parallel() // tests that set testHookStopped are not parallel
	tg, ids := deadlockTarget(t)
	if err := syscall.Kill(tg.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(tg.Pid, syscall.SIGCONT)
	allStopped := func() bool {
		tids, _ := procfs.Threads(tg.Pid)
		for _, tid := range tids {
			if st, err := procfs.ReadStatus(tg.Pid, tid); err != nil || st.State != 'T' {
				return false
			}
		}
		return true
	}
	if err := testutil.Eventually(5*time.Second, allStopped); err != nil {
		t.Fatal("SIGSTOP did not stop every thread")
	}
	before := readCounter(t, tg.Pid, ids["counter"])
	snap := take(t, tg.Pid, Options{})
	if !snap.PtraceUsed {
		t.Error("no thread was read under ptrace")
	}
	if !strings.Contains(strings.Join(snap.Notes, "\n"), "left stopped") {
		t.Errorf("notes %q do not say the process was left stopped", snap.Notes)
	}
	// A thread let go re-enters the group stop through a brief wake-up
	// inside the kernel; a thread resumed for real never comes back to T.
	if err := testutil.Eventually(5*time.Second, allStopped); err != nil {
		t.Error("the snapshot resumed a process stopped by SIGSTOP")
	}
	// Nor did any thread run user code in between: the progress thread
	// counts once a millisecond.
	if after := readCounter(t, tg.Pid, ids["counter"]); after != before {
		t.Errorf("the progress counter moved from %d to %d while the process was stopped", before, after)
	}
	assertNotTraced(t, tg.Pid)
	syscall.Kill(tg.Pid, syscall.SIGCONT)
	assertProgress(t, tg)
}

// readCounter reads the unsigned long at addr in pid's memory.
func readCounter(t *testing.T, pid, addr int) uint64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [8]byte
	if _, err := f.ReadAt(b[:], int64(addr)); err != nil {
		t.Fatalf("read the progress counter at %#x: %v", addr, err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// assertNotTraced checks that no thread of pid is traced (stopped is fine).
func assertNotTraced(t *testing.T, pid int) {
	t.Helper()
	tids, _ := procfs.Threads(pid)
	for _, tid := range tids {
		if st, err := procfs.ReadStatus(pid, tid); err == nil && (st.TracerPid != 0 || st.State == 't') {
			t.Errorf("thread %d: state %c TracerPid %d", tid, st.State, st.TracerPid)
		}
	}
}

// TestTargetExitsMidSnapshot: the target is killed while the snapshot
// holds its first thread stopped; Take returns what it read, marked.
func TestTargetExitsMidSnapshot(t *testing.T) {
	tg, _ := deadlockTarget(t)
	var killed atomic.Bool // two threads may be stopped at once
	testHookStopped = func(tid int) {
		if !killed.Swap(true) {
			syscall.Kill(tg.Pid, syscall.SIGKILL)
		}
	}
	defer func() { testHookStopped = nil }()
	snap := take(t, tg.Pid, Options{stopSleepers: true})
	if !killed.Load() {
		t.Fatal("no thread was stopped")
	}
	if !snap.TargetExited {
		t.Error("TargetExited not set")
	}
	if len(snap.Threads) == 0 {
		t.Error("no thread kept: the facts read before the exit are lost")
	}
	if !strings.Contains(strings.Join(snap.Notes, "\n"), "exited during the snapshot") {
		t.Errorf("notes %q do not say the process exited", snap.Notes)
	}
}

// TestPanicWhileStopped: a failure in our code while a thread is stopped
// lets the thread go and is reported; the snapshot goes on.
func TestPanicWhileStopped(t *testing.T) {
	tg, ids := deadlockTarget(t)
	testHookStopped = func(tid int) {
		if tid == ids["progress"] {
			panic("injected")
		}
	}
	defer func() { testHookStopped = nil }()
	snap := take(t, tg.Pid, Options{stopSleepers: true})
	if !strings.Contains(strings.Join(snap.Notes, "\n"), "internal error while thread") {
		t.Errorf("notes %q do not report the failure", snap.Notes)
	}
	if th := threadOf(t, snap, ids["a"]); !th.Stopped || len(th.User) < 3 {
		t.Errorf("the threads after the failure were not read: %+v", th)
	}
	assertReleased(t, tg.Pid)
	assertProgress(t, tg)
}

// TestKilledWhileSeized: a stallwatch that dies by SIGKILL while it holds
// a thread stopped leaves nothing behind: the kernel detaches, the thread
// runs again (its progress counter moves).
func TestKilledWhileSeized(t *testing.T) {
	t.Parallel() // tests that set testHookStopped are not parallel
	tg, ids := deadlockTarget(t)
	prog := ids["progress"]
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+helperHold,
		"SNAPSHOT_TEST_PID="+strconv.Itoa(tg.Pid), "SNAPSHOT_TEST_TID="+strconv.Itoa(prog))
	h := testutil.StartCmd(t, helper)
	h.WaitLine(t, "seized ", 30*time.Second)
	st, err := procfs.ReadStatus(tg.Pid, prog)
	tracer, _ := procfs.ReadStatus(st.TracerPid, st.TracerPid)
	if err != nil || st.State != 't' || tracer.Tgid != h.Pid {
		t.Fatalf("progress thread not held by the helper: %+v, %v", st, err)
	}
	if err := h.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	assertReleased(t, tg.Pid)
	assertProgress(t, tg)
}

// TestPtraceRefused: an unprivileged stallwatch (user nobody) asked for a
// root process gets what /proc shows it, with PtraceErr saying which
// capability is missing and how to grant it (a *perms.Error), and stops
// nothing.
func TestPtraceRefused(t *testing.T) {
	t.Parallel() // tests that set testHookStopped are not parallel
	testutil.RequireRoot(t)
	tg, _ := deadlockTarget(t)
	dir, err := os.MkdirTemp("", "snapshot-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "snapshot.test")
	testutil.CopyExecutable(t, os.Args[0], bin)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), helperEnv+"="+helperTake, "SNAPSHOT_TEST_PID="+strconv.Itoa(tg.Pid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("helper as nobody: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	var snap helperSnapshot
	if err := json.Unmarshal(out, &snap); err != nil {
		t.Fatalf("helper output: %v\n%s", err, out)
	}
	if !snap.PtraceErrPerms || !strings.Contains(snap.PtraceErr, "CAP_SYS_PTRACE") || !strings.Contains(snap.PtraceErr, "--no-ptrace") {
		t.Errorf("PtraceErr %q (a perms.Error: %v) does not name CAP_SYS_PTRACE and the fix", snap.PtraceErr, snap.PtraceErrPerms)
	}
	if snap.PtraceUsed || len(snap.Threads) != 5 {
		t.Errorf("PtraceUsed %v, %d threads; want no ptrace and all 5 threads", snap.PtraceUsed, len(snap.Threads))
	}
	for _, th := range snap.Threads {
		if th.Name == "" || th.State == 0 {
			t.Errorf("thread %d without /proc facts: %+v", th.TID, th)
		}
	}
	t.Logf("notes: %q", snap.Notes)
	assertReleased(t, tg.Pid)
}
