package report_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// Each finding on a real target that produces it, and not on the others.
// Every capture here is what `stallwatch record --snapshot` takes: no
// flight recorder, a second of sampling and a thread snapshot.

// record captures pid once, as `stallwatch record --snapshot` does.
func record(t *testing.T, pid int) *report.Capture {
	t.Helper()
	s := session(t, pid, capture.Config{NoFlightRecorder: true})
	c, _ := captureNow(t, s, model.Trigger{Kind: model.Manual})
	t.Logf("findings:\n%s", findingsText(c))
	return c
}

// unrelated are the findings no test target but its own produces.
var unrelated = []model.FindingKind{model.FindingStopped, model.FindingDeadlock, model.FindingRuntimePause,
	model.FindingEventLoopBlocked, model.FindingGIL, model.FindingLockConvoy, model.FindingUninterruptible}

func mustOnly(t *testing.T, c *report.Capture, k model.FindingKind) model.Finding {
	t.Helper()
	f := mustFinding(t, c, k)
	for _, o := range unrelated {
		if o != k {
			mustNotFinding(t, c, o)
		}
	}
	return f
}

// waitState waits until every thread of pid is in one of states.
func waitState(t *testing.T, pid int, tid int, states string) {
	t.Helper()
	err := testutil.Eventually(20*time.Second, func() bool {
		st, err := procfs.ReadStatus(pid, tid)
		return err == nil && strings.IndexByte(states, st.State) >= 0
	})
	if err != nil {
		st, _ := procfs.ReadStatus(pid, tid)
		t.Fatalf("thread %d of %d is in state %c, want one of %q", tid, pid, st.State, states)
	}
}

func TestFindingStopped(t *testing.T) {
	bin := testutil.BuildGo(t, "spin")
	tg := testutil.Start(t, bin, "-threads", "2")
	tg.WaitLine(t, "ready", 10*time.Second)
	if err := syscall.Kill(tg.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(tg.Pid, syscall.SIGCONT) })
	waitState(t, tg.Pid, tg.Pid, "T")
	c := record(t, tg.Pid)
	if len(c.Info.Findings) == 0 || c.Info.Findings[0].Kind != model.FindingStopped || c.Info.Findings[0].Severity != model.SeverityCritical {
		t.Fatalf("the first finding is not that the process is stopped:\n%s", findingsText(c))
	}
	f := c.Info.Findings[0]
	if !strings.Contains(f.Detail, fmt.Sprintf("kill -CONT %d", tg.Pid)) || !hasTID(f, tg.Pid) {
		t.Errorf("the stopped finding: %+v", f)
	}
}

func TestFindingUninterruptibleVfork(t *testing.T) {
	bin := testutil.BuildC(t, "stalls/vfork.c")
	tg := testutil.Start(t, bin, "60")
	tg.WaitLine(t, "ready", 10*time.Second)
	waitState(t, tg.Pid, tg.Pid, "D")
	t.Cleanup(func() { killChildren(tg.Pid) })
	c := record(t, tg.Pid)
	f := mustOnly(t, c, model.FindingUninterruptible)
	if !hasTID(f, tg.Pid) || !strings.Contains(strings.Join(f.Functions, " "), "vfork") || !strings.Contains(f.Detail, "vfork") {
		t.Errorf("the D-state finding should name the main thread in the kernel's vfork wait: %+v", f)
	}
}

// killChildren kills the children of pid (the vfork child, which holds its
// parent in D state).
func killChildren(pid int) {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(b)) {
		var c int
		fmt.Sscan(f, &c)
		if c > 0 {
			syscall.Kill(c, syscall.SIGKILL)
		}
	}
}

func TestFindingLockConvoy(t *testing.T) {
	bin := testutil.BuildC(t, "stalls/convoy.c")
	tg := testutil.Start(t, bin, "4")
	tg.WaitLine(t, "ready", 10*time.Second)
	owner := tidOf(t, tg.Pid, "owner")
	for i := 0; i < 4; i++ {
		waitState(t, tg.Pid, tidOf(t, tg.Pid, fmt.Sprintf("waiter-%d", i)), "S")
	}
	c := record(t, tg.Pid)
	f := mustOnly(t, c, model.FindingLockConvoy)
	if len(f.TIDs) != 5 || f.TIDs[0] != owner || !strings.Contains(f.Summary, "4 threads wait") || !strings.Contains(strings.Join(f.Functions, " "), "slow_call_under_lock") {
		t.Errorf("the convoy should name the owner %d first, in slow_call_under_lock, and its 4 waiters: %+v", owner, f)
	}
}

func TestFindingCPUStarvation(t *testing.T) {
	bin := testutil.BuildC(t, "stalls/affinity.c")
	tg := testutil.Start(t, bin, "3")
	tg.WaitLine(t, "ready", 10*time.Second)
	c := record(t, tg.Pid)
	f := mustOnly(t, c, model.FindingCPUStarvation)
	if len(f.TIDs) < 2 || !strings.Contains(f.Detail, "The host:") {
		t.Errorf("three threads bound to one CPU: at least two starved, with the host's load: %+v", f)
	}
	mustNotFinding(t, c, model.FindingSpinning)
}

func TestFindingGoStopTheWorld(t *testing.T) {
	bin := testutil.BuildGo(t, "gostw")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "GODEBUG=asyncpreemptoff=1")
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 10*time.Second)
	tg.WaitLine(t, "collecting", 10*time.Second)
	c := record(t, tg.Pid)
	f := mustOnly(t, c, model.FindingRuntimePause)
	if f.Runtime != "go" || !strings.Contains(f.Summary, "main.spin") || !strings.Contains(strings.Join(f.Functions, " "), "runtime.stopTheWorldWithSema") {
		t.Errorf("the Go stop-the-world should name runtime.stopTheWorldWithSema and main.spin, which does not stop: %+v", f)
	}
}

func TestFindingJulia(t *testing.T) {
	// Julia is not on this machine: a stand-in whose functions carry the
	// names of Julia's runtime, run as "julia" (see its source).
	bin := testutil.BuildC(t, "stalls/julia_standin.c", "-fno-inline", "-fno-optimize-sibling-calls")
	julia := filepath.Join(t.TempDir(), "julia")
	if err := os.Rename(bin, julia); err != nil {
		t.Fatal(err)
	}
	tg := testutil.Start(t, julia, "3")
	tg.WaitLine(t, "ready", 10*time.Second)
	busy := tidOf(t, tg.Pid, "julia-busy")
	c := record(t, tg.Pid)
	f := mustOnly(t, c, model.FindingRuntimePause)
	if f.Runtime != "julia" || len(f.TIDs) == 0 || f.TIDs[0] != busy || !strings.Contains(f.Summary, "julia_busy_loop_123") ||
		!strings.Contains(strings.Join(f.Functions, " "), "jl_gc_wait_for_the_world") {
		t.Errorf("the Julia GC pause should name the busy thread %d (julia_busy_loop_123) first and jl_gc_wait_for_the_world: %+v", busy, f)
	}
}

func TestFindingJVMSafepoints(t *testing.T) {
	java := testutil.RequireTool(t, "java")
	cmd := exec.Command(java, "-Xmx768m", "-XX:+UseG1GC", testutil.Testdata(t, "stalls", "GcLoop.java"), "200")
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 60*time.Second)
	c := record(t, tg.Pid)
	f := mustOnly(t, c, model.FindingRuntimePause)
	if f.Runtime != "jvm" || !strings.Contains(f.Summary, "JVM safepoint") || !strings.Contains(strings.Join(f.Functions, " "), "VM_G1CollectFull") {
		t.Errorf("the JVM finding should name its safepoints and the full GC operation: %+v", f)
	}
}

// startNodeServer starts httpblock.js and blocks its event loop with a
// request to /block.
func startNodeServer(t *testing.T, flags ...string) *testutil.Target {
	t.Helper()
	node := testutil.RequireTool(t, "node")
	cmd := exec.Command(node, append(flags, testutil.Testdata(t, "node", "httpblock.js"))...)
	cmd.Dir = t.TempDir() // perf maps and jitdumps go to /tmp and here
	tg := testutil.StartCmd(t, cmd)
	line := tg.WaitLine(t, "ready", 20*time.Second)
	var pid, port int
	fmt.Sscanf(line, "ready %d %d", &pid, &port)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/block", port), nil)
	go http.DefaultClient.Do(req) // it never answers
	// The event loop is blocked once the main thread stays on the CPU.
	start, _ := testutil.CPUTime(tg.Pid)
	testutil.WaitCPU(t, tg.Pid, start+300*time.Millisecond, 30*time.Second)
	t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)) })
	return tg
}

func TestFindingNodeEventLoop(t *testing.T) {
	tg := startNodeServer(t, "--perf-basic-prof")
	c := record(t, tg.Pid)
	f := mustOnly(t, c, model.FindingEventLoopBlocked)
	if len(f.TIDs) != 1 || f.TIDs[0] != tg.Pid || !strings.Contains(strings.Join(f.Functions, " "), "busyLoop") {
		t.Errorf("the event loop finding should name the main thread and busyLoop: %+v", f)
	}
	mustNotFinding(t, c, model.FindingMissingJITSymbols)
}

func TestFindingNodeWithoutPerfMap(t *testing.T) {
	tg := startNodeServer(t)
	c := record(t, tg.Pid)
	f := mustFinding(t, c, model.FindingMissingJITSymbols)
	if f.Runtime != "node" || !strings.Contains(f.Detail, "--perf-basic-prof") {
		t.Errorf("the missing JIT names finding should tell to start node with --perf-basic-prof: %+v", f)
	}
	ev := mustFinding(t, c, model.FindingEventLoopBlocked)
	if !strings.Contains(ev.Summary, "has no names") {
		t.Errorf("the event loop finding should say the JIT code has no names: %s", ev.Summary)
	}
}

func TestFindingPythonGIL(t *testing.T) {
	py := "/root/.pyenv/versions/3.12.1/bin/python3.12"
	if _, err := os.Stat(py); err != nil {
		testutil.Skip(t, "no CPython 3.12 with symbols at %s: %v", py, err)
	}
	tg := testutil.StartCmd(t, exec.Command(py, "-X", "perf", testutil.Testdata(t, "stalls", "gil.py"), "3"))
	tg.WaitLine(t, "ready", 20*time.Second)
	t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)) })
	c := record(t, tg.Pid)
	f := mustOnly(t, c, model.FindingGIL)
	if f.Runtime != "python" || len(f.TIDs) < 2 || !strings.Contains(strings.Join(f.Functions, " "), "take_gil") {
		t.Errorf("the GIL finding should name the holder and the waiters in take_gil: %+v", f)
	}
	// The holder's Python function (py::crunch with -X perf) needs a
	// whole native stack: this CPython has no frame pointers, so neither
	// the samples nor the snapshot reach its perf trampolines here.
}

// TestFindingPythonJitdumpBuffered: CPython 3.13 -X perf_jit, live. Its
// jitdump is buffered until exit, so the hot functions' trampolines have
// no names; the finding says why, how many, and that -X perf names them.
// With -X perf the same program's functions are named and nothing is said.
func TestFindingPythonJitdumpBuffered(t *testing.T) {
	py := "/root/.pyenv/versions/3.13.0/bin/python3"
	if _, err := os.Stat(py); err != nil {
		testutil.Skip(t, "no CPython 3.13 with symbols at %s: %v", py, err)
	}
	start := func(t *testing.T, mode string) *testutil.Target {
		tg := testutil.StartCmd(t, exec.Command(py, "-X", mode, testutil.Testdata(t, "stalls", "pyhot.py")))
		tg.WaitLine(t, "ready", 20*time.Second)
		t.Cleanup(func() {
			os.Remove(fmt.Sprintf("/tmp/perf-%d.map", tg.Pid))
			os.Remove(fmt.Sprintf("/tmp/jit-%d.dump", tg.Pid))
		})
		return tg
	}
	t.Run("perf_jit", func(t *testing.T) {
		c := record(t, start(t, "perf_jit").Pid)
		if c.Info.Counts.JITSources == 0 {
			t.Fatalf("no JIT source read: %+v", c.Info.Counts)
		}
		f := mustFinding(t, c, model.FindingMissingJITSymbols)
		var n, m int
		if _, err := fmt.Sscanf(f.Summary, "CPython functions without names: %d of the %d", &n, &m); err != nil || n < 1 || n > m {
			t.Errorf("the summary does not count the unnamed functions (%v): %s", err, f.Summary)
		}
		for _, w := range []string{"jitdump", "only when the interpreter exits", "-X perf "} {
			if !strings.Contains(f.Detail, w) {
				t.Errorf("the detail does not say %q: %s", w, f.Detail)
			}
		}
		if f.Runtime != "python" {
			t.Errorf("runtime %q, want python", f.Runtime)
		}
	})
	t.Run("perf", func(t *testing.T) {
		c := record(t, start(t, "perf").Pid)
		mustNotFinding(t, c, model.FindingMissingJITSymbols)
	})
}
