package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

var snapshotBin struct {
	sync.Once
	path string
	err  error
	out  []byte
}

// stallwatchForSnapshot builds the stallwatch binary once: the snapshot
// must come from another process than the target's parent to stop the
// target's main thread too (see snapshot.Options).
func stallwatchForSnapshot(t *testing.T) string {
	t.Helper()
	testutil.EndToEnd(t)
	snapshotBin.Do(func() {
		dir, err := buildTemp("stallwatch-snapshot-test-")
		if err != nil {
			snapshotBin.err = err
			return
		}
		snapshotBin.path = filepath.Join(dir, "stallwatch")
		snapshotBin.out, snapshotBin.err = exec.Command("go", "build", "-o", snapshotBin.path, ".").CombinedOutput()
	})
	if snapshotBin.err != nil {
		t.Fatalf("go build: %v\n%s", snapshotBin.err, snapshotBin.out)
	}
	return snapshotBin.path
}

func snapshotDeadlock(t *testing.T) (*testutil.Target, map[string]int) {
	t.Helper()
	testutil.RequirePtrace(t)
	tg := testutil.Start(t, testutil.BuildC(t, "deadlock/deadlock.c"))
	line := tg.WaitLine(t, "ready ", 10*time.Second)
	ids := map[string]int{}
	for _, f := range strings.Fields(line)[1:] {
		k, v, _ := strings.Cut(f, "=")
		ids[k], _ = strconv.Atoi(v)
	}
	for _, k := range []string{"a", "b", "waiter"} {
		tid := ids[k]
		if err := testutil.Eventually(10*time.Second, func() bool {
			sc, err := procfs.ReadSyscall(tg.Pid, tid)
			return err == nil && sc.Nr == 202
		}); err != nil {
			t.Fatalf("thread %s never blocked", k)
		}
	}
	return tg, ids
}

// TestSnapshotCommand: `stallwatch snapshot` on a deadlocked process
// prints the deadlock in text and JSON, reads every thread's user stack
// including the main one's (it is not the target's parent: its stop is
// allowed, where one is needed; threads asleep in a system call are read
// without one), and writes a capture directory with --out.
func TestSnapshotCommand(t *testing.T) {
	tg, ids := snapshotDeadlock(t)
	bin := stallwatchForSnapshot(t)
	pid := strconv.Itoa(tg.Pid)

	text, err := exec.Command(bin, "snapshot", "--pid", pid).Output()
	if err != nil {
		t.Fatalf("snapshot: %v\n%s", err, text)
	}
	for _, want := range []string{"DEADLOCK", "take_b_while_holding_a", "take_a_while_holding_b", "wait_for_a"} {
		if !bytes.Contains(text, []byte(want)) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}

	out := t.TempDir()
	js, err := exec.Command(bin, "snapshot", "--pid", pid, "--format", "json", "--out", out).Output()
	if err != nil {
		t.Fatalf("snapshot --format json: %v", err)
	}
	snap, err := model.ReadSnapshotJSON(bytes.NewReader(js), "stdout")
	if err != nil {
		t.Fatalf("JSON output: %v\n%s", err, js)
	}
	if len(snap.Locks.Cycles) != 1 || len(snap.Threads) != 5 {
		t.Errorf("%d cycles, %d threads; want 1 and 5", len(snap.Locks.Cycles), len(snap.Threads))
	}
	for _, n := range snap.Notes {
		if strings.Contains(n, "target's parent") {
			t.Errorf("note %q: stallwatch snapshot is not the target's parent", n)
		}
	}
	for _, th := range snap.Threads {
		if th.State != 'R' && (len(th.User) < 2 || th.Err != nil) {
			t.Errorf("thread %d (%s): user stack of %d frames (stopped %v, by %s): %v", th.TID, th.Name, len(th.User), th.Stopped, th.Unwinder, th.Err)
		}
		if th.TID == ids["a"] && (th.Wait == nil || th.Wait.Owner != ids["b"]) {
			t.Errorf("worker-a waits for %+v, want worker-b", th.Wait)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(out, "*-"+pid+"-manual"))
	if len(dirs) != 1 {
		t.Fatalf("capture directories %v, want one", dirs)
	}
	for _, f := range []string{capdir.FileThreads, capdir.FileThreadJSON, capdir.FileText, capdir.FileInfo} {
		if _, err := os.Stat(filepath.Join(dirs[0], f)); err != nil {
			t.Errorf("capture lacks %s: %v", f, err)
		}
	}
}

// TestSnapshotSIGTERM: SIGTERM while a 1,000-thread snapshot is being
// taken ends it early, and leaves no thread stopped or traced.
func TestSnapshotSIGTERM(t *testing.T) {
	testutil.RequirePtrace(t)
	tg := testutil.Start(t, testutil.BuildC(t, "manythreads/manythreads.c"), "1000")
	tg.WaitLine(t, "ready 1000", 30*time.Second)
	bin := stallwatchForSnapshot(t)
	cmd := exec.Command(bin, "snapshot", "--pid", strconv.Itoa(tg.Pid))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until it is stopping threads, then interrupt it.
	err := testutil.Eventually(20*time.Second, func() bool {
		tids, _ := procfs.Threads(tg.Pid)
		for _, tid := range tids {
			if st, err := procfs.ReadStatus(tg.Pid, tid); err == nil && st.TracerPid != 0 {
				return true
			}
		}
		return false
	})
	cmd.Process.Signal(syscall.SIGTERM)
	werr := cmd.Wait()
	t.Logf("exit: %v; stderr: %s", werr, stderr.String())
	if err == nil && !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("SIGTERM mid-snapshot: exit %v, stderr %q; want it reported as interrupted", werr, stderr.String())
	}
	tids, _ := procfs.Threads(tg.Pid)
	for _, tid := range tids {
		if st, err := procfs.ReadStatus(tg.Pid, tid); err == nil && (st.TracerPid != 0 || st.State == 't') {
			t.Errorf("thread %d left state %c, TracerPid %d", tid, st.State, st.TracerPid)
		}
	}
}

// TestSnapshotUsage: bad invocations are usage errors (exit 2); a pid that
// does not exist is a failure (exit 1).
func TestSnapshotUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"snapshot"}, exitUsage},
		{[]string{"snapshot", "--pid", "1", "--format", "xml"}, exitUsage},
		{[]string{"snapshot", "--pid", "1", "extra"}, exitUsage},
		{[]string{"snapshot", "--pid", "999999999"}, exitFailure},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != tc.code {
			t.Errorf("%v: exit %d, want %d; stderr %s", tc.args, code, tc.code, stderr.String())
		}
	}
}

// TestSnapshotTwice: a second `stallwatch snapshot` of a permanent
// deadlock says how long its threads have been blocked, not how long
// since the first run's ptrace stop woke them (3.35 s became 692 ms): the
// first run leaves what its stops reset in the runtime directory, and a
// later run removes the marks of a process that is gone. (A thread read
// without a stop, asleep in its system call, keeps the kernel's time.)
func TestSnapshotTwice(t *testing.T) {
	tg, ids := snapshotDeadlock(t)
	bin := stallwatchForSnapshot(t)
	pid := strconv.Itoa(tg.Pid)
	runtime := t.TempDir() // $XDG_RUNTIME_DIR, where the marks are kept
	snap := func() *model.Snapshot {
		cmd := exec.Command(bin, "snapshot", "-p", pid, "--format", "json")
		cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+runtime)
		js, err := cmd.Output()
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		s, err := model.ReadSnapshotJSON(bytes.NewReader(js), "stdout")
		if err != nil {
			t.Fatalf("JSON output: %v\n%s", err, js)
		}
		return s
	}
	// Spans to measure, not synchronization.
	const before, between = 600 * time.Millisecond, 300 * time.Millisecond
	time.Sleep(before)
	first := snap()
	time.Sleep(between)
	second := snap()
	carried := 0
	for _, k := range []string{"a", "b", "waiter"} {
		t1, t2 := dumpThread(t, first, ids[k]), dumpThread(t, second, ids[k])
		if !t1.Stopped && t2.VoluntarySwitches == t1.VoluntarySwitches {
			// Read without a stop (asleep in its system call): the
			// kernel's time was never reset.
			carried++
			if t1.OffCPUFor < before || t2.OffCPUFor < t1.OffCPUFor+between-10*time.Millisecond {
				t.Errorf("thread %s: off the CPU %v, then %v after %v more, read without a stop", k, t1.OffCPUFor, t2.OffCPUFor, between)
			}
			continue
		}
		if t2.VoluntarySwitches != t1.VoluntarySwitches+2 {
			t.Logf("thread %s did more than the first run's stop (switches %d → %d): its time is the kernel's", k, t1.VoluntarySwitches, t2.VoluntarySwitches)
			continue
		}
		carried++
		if t1.OffCPUFor < before || t2.OffCPUFor < t1.OffCPUFor+between-10*time.Millisecond {
			t.Errorf("thread %s: off the CPU %v, then %v after %v more: the first run's stop reset it", k, t1.OffCPUFor, t2.OffCPUFor, between)
		}
		if !strings.Contains(t2.OffCPUSource, "earlier stallwatch stop") {
			t.Errorf("thread %s: off-CPU source %q does not say it runs from before the earlier stop", k, t2.OffCPUSource)
		}
	}
	if carried == 0 {
		t.Fatal("every deadlocked thread did more than the first run's stop")
	}
	marks := filepath.Join(runtime, "stallwatch", "stops")
	stopped := slices.ContainsFunc(first.Threads, func(th model.Thread) bool { return th.Stopped })
	if _, err := os.Stat(filepath.Join(marks, pid+".json")); err != nil && stopped {
		t.Errorf("no marks kept for pid %s: %v", pid, err)
	}
	gone := filepath.Join(marks, "999999999.json") // no such pid
	if err := os.WriteFile(gone, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	snap()
	if _, err := os.Stat(gone); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the marks of a process that is gone were kept: %v", err)
	}
}

func dumpThread(t *testing.T, s *model.Snapshot, tid int) *model.Thread {
	t.Helper()
	for i := range s.Threads {
		if s.Threads[i].TID == tid {
			return &s.Threads[i]
		}
	}
	t.Fatalf("thread %d is not in the snapshot", tid)
	return nil
}
