package analysis_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// A scenario is a real target brought to a state a finding is about
// (run: it returns the capture directory), and what the findings of its
// capture must say (expect: from the capture's content alone, so that it
// holds for the capture kept in the corpus as for a fresh one).
type scenario struct {
	name   string
	about  string // the target and what it does, for the corpus
	run    func(t *testing.T) string
	expect func(t *testing.T, c *report.Capture)
}

// unrelated are the findings no scenario but its own produces.
var unrelated = []model.FindingKind{model.FindingStopped, model.FindingDeadlock, model.FindingRuntimePause, model.FindingCPUThrottled,
	model.FindingEventLoopBlocked, model.FindingGIL, model.FindingLockConvoy, model.FindingUninterruptible}

var scenarios = []scenario{{
	name:  "demo-deadlock",
	about: "testdata/demo (make demo's bank service), --heartbeat FILE --every 100ms --healthy-for 1s: two transfer threads deadlock, the heartbeat writer waits for their lock, a reconciler spins; captured with a flight recorder once the heartbeat was 1.5 s old, as `stallwatch watch --heartbeat-file FILE --stall-after 1.5s` does",
	run: func(t *testing.T) string {
		bin := testutil.BuildGo(t, "demo")
		beat := filepath.Join(t.TempDir(), "demo.beat")
		tg := testutil.Start(t, bin, "--heartbeat", beat, "--every", "100ms", "--healthy-for", "1s")
		tg.WaitLine(t, "ready", 20*time.Second)
		s := session(t, tg.Pid, capture.Config{})
		tg.WaitLine(t, "deadlocking", 20*time.Second)
		for _, n := range []string{"transfer-c2s", "transfer-s2c", "heartbeat", "reconciler"} {
			liveTID(t, tg.Pid, n)
		}
		const stallAfter = 1500 * time.Millisecond
		if err := testutil.Eventually(30*time.Second, func() bool { return fileAge(beat) >= stallAfter }); err != nil {
			t.Fatalf("the demo's heartbeat did not stall: %v", err)
		}
		last := time.Now().Add(-fileAge(beat))
		return captureNow(t, s, model.Trigger{Kind: model.Stall, At: time.Now(), LastBeat: last, StallFor: time.Since(last),
			Source: "file " + beat, Reason: fmt.Sprintf("no heartbeat from file %s for %v", beat, stallAfter)})
	},
	expect: expectDemo,
}, {
	name:  "stopped",
	about: "testdata/spin -threads 2, stopped with SIGSTOP",
	run: func(t *testing.T) string {
		tg := testutil.Start(t, testutil.BuildGo(t, "spin"), "-threads", "2")
		tg.WaitLine(t, "ready", 10*time.Second)
		if err := syscall.Kill(tg.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(tg.Pid, syscall.SIGCONT) })
		waitState(t, tg.Pid, tg.Pid, "T")
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := first(t, c, model.FindingStopped)
		if f.Severity != model.SeverityCritical || !strings.Contains(f.Detail, fmt.Sprintf("kill -CONT %d", c.Info.PID)) || !slices.Contains(f.TIDs, c.Info.PID) {
			t.Errorf("the stopped finding: %+v", f)
		}
	},
}, {
	name:  "vfork",
	about: "testdata/stalls/vfork.c 60: the main thread vforks a child that sleeps, and waits in D state",
	run: func(t *testing.T) string {
		tg := testutil.Start(t, testutil.BuildC(t, "stalls/vfork.c"), "60")
		tg.WaitLine(t, "ready", 10*time.Second)
		waitState(t, tg.Pid, tg.Pid, "D")
		t.Cleanup(func() { killChildren(tg.Pid) })
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := only(t, c, model.FindingUninterruptible)
		if !slices.Contains(f.TIDs, c.Info.PID) || !strings.Contains(strings.Join(f.Functions, " "), "vfork") || !strings.Contains(f.Detail, "vfork") {
			t.Errorf("the D-state finding should name the main thread in the kernel's vfork wait: %+v", f)
		}
	},
}, {
	name:  "convoy",
	about: "testdata/stalls/convoy.c 4: thread owner holds a mutex in slow_call_under_lock while four waiters queue for it",
	run: func(t *testing.T) string {
		tg := testutil.Start(t, testutil.BuildC(t, "stalls/convoy.c"), "4")
		tg.WaitLine(t, "ready", 10*time.Second)
		for i := 0; i < 4; i++ {
			waitState(t, tg.Pid, liveTID(t, tg.Pid, fmt.Sprintf("waiter-%d", i)), "S")
		}
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := only(t, c, model.FindingLockConvoy)
		owner := tidNamed(t, c, "owner")
		if len(f.TIDs) != 5 || f.TIDs[0] != owner || !strings.Contains(f.Summary, "4 threads wait") || !strings.Contains(strings.Join(f.Functions, " "), "slow_call_under_lock") {
			t.Errorf("the convoy should name the owner %d first, in slow_call_under_lock, and its 4 waiters: %+v", owner, f)
		}
	},
}, {
	name:  "starvation",
	about: "testdata/stalls/affinity.c 3: three threads spin bound to one CPU",
	run: func(t *testing.T) string {
		tg := testutil.Start(t, testutil.BuildC(t, "stalls/affinity.c"), "3")
		tg.WaitLine(t, "ready", 10*time.Second)
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := only(t, c, model.FindingCPUStarvation)
		if len(f.TIDs) < 2 || !strings.Contains(f.Detail, "The host:") {
			t.Errorf("three threads bound to one CPU: at least two starved, with the host's load: %+v", f)
		}
		none(t, c, model.FindingSpinning)
	},
}, {
	name:  "go-stop-the-world",
	about: "testdata/gostw under GODEBUG=asyncpreemptoff=1: a loop the Go runtime cannot preempt holds up a collection's stop-the-world",
	run: func(t *testing.T) string {
		cmd := exec.Command(testutil.BuildGo(t, "gostw"))
		cmd.Env = append(os.Environ(), "GODEBUG=asyncpreemptoff=1")
		tg := testutil.StartCmd(t, cmd)
		tg.WaitLine(t, "ready", 10*time.Second)
		tg.WaitLine(t, "collecting", 10*time.Second)
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := only(t, c, model.FindingRuntimePause)
		if f.Runtime != "go" || !strings.Contains(f.Summary, "main.spin") || !strings.Contains(strings.Join(f.Functions, " "), "runtime.stopTheWorldWithSema") {
			t.Errorf("the Go stop-the-world should name runtime.stopTheWorldWithSema and main.spin, which does not stop: %+v", f)
		}
	},
}, {
	name: "julia-standin",
	// Julia is not on this machine: a stand-in whose functions carry the
	// names of Julia's runtime, run as "julia" (see its source).
	about: "testdata/stalls/julia_standin.c 3, run as julia (Julia is not on the test machine: functions named as Julia's runtime names them): a GC waits in jl_gc_wait_for_the_world for a thread that does not reach a safepoint",
	run: func(t *testing.T) string {
		bin := testutil.BuildC(t, "stalls/julia_standin.c", "-fno-inline", "-fno-optimize-sibling-calls")
		julia := filepath.Join(t.TempDir(), "julia")
		if err := os.Rename(bin, julia); err != nil {
			t.Fatal(err)
		}
		tg := testutil.Start(t, julia, "3")
		tg.WaitLine(t, "ready", 10*time.Second)
		liveTID(t, tg.Pid, "julia-busy")
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := only(t, c, model.FindingRuntimePause)
		busy := tidNamed(t, c, "julia-busy")
		if f.Runtime != "julia" || len(f.TIDs) == 0 || f.TIDs[0] != busy || !strings.Contains(f.Summary, "julia_busy_loop_123") ||
			!strings.Contains(strings.Join(f.Functions, " "), "jl_gc_wait_for_the_world") {
			t.Errorf("the Julia GC pause should name the busy thread %d (julia_busy_loop_123) first and jl_gc_wait_for_the_world: %+v", busy, f)
		}
	},
}, {
	name:  "dotnet-standin",
	about: "testdata/stalls/dotnet_standin.cpp 3, run as dotnet (.NET is not on the test machine: functions named as CoreCLR names them): a suspension waits for a thread that runs without a GC poll",
	run: func(t *testing.T) string {
		gxx := testutil.RequireTool(t, "g++")
		dotnet := filepath.Join(t.TempDir(), "dotnet")
		out, err := exec.Command(gxx, "-O1", "-g", "-pthread", "-fno-omit-frame-pointer", "-fno-inline", "-fno-optimize-sibling-calls",
			"-o", dotnet, testutil.Testdata(t, "stalls", "dotnet_standin.cpp")).CombinedOutput()
		if err != nil {
			t.Fatalf("g++: %v\n%s", err, out)
		}
		tg := testutil.Start(t, dotnet, "3")
		tg.WaitLine(t, "ready", 10*time.Second)
		liveTID(t, tg.Pid, ".NET busy")
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := only(t, c, model.FindingRuntimePause)
		busy := tidNamed(t, c, ".NET busy")
		if f.Runtime != "dotnet" || len(f.TIDs) == 0 || f.TIDs[0] != busy || !strings.Contains(f.Summary, "Program_Spin_NoGCPoll") ||
			!strings.Contains(strings.Join(f.Functions, " "), "ThreadSuspend::SuspendRuntime") {
			t.Errorf("the .NET suspension should name the busy thread %d (Program_Spin_NoGCPoll) first and ThreadSuspend::SuspendRuntime: %+v", busy, f)
		}
	},
}, {
	name:  "jvm-safepoints",
	about: "java -Xmx768m -XX:+UseG1GC testdata/stalls/GcLoop.java 200 (OpenJDK 17): System.gc() in a loop, a full collection at each safepoint",
	run: func(t *testing.T) string {
		java := testutil.RequireTool(t, "java")
		var pid int
		t.Cleanup(func() { // after the target's own cleanup killed it: the capture asked for its perf map
			if pid != 0 {
				testutil.RemoveJavaLeftovers(pid)
			}
		})
		tg := testutil.StartCmd(t, exec.Command(java, "-Xmx768m", "-XX:+UseG1GC", testutil.Testdata(t, "stalls", "GcLoop.java"), "200"))
		pid = tg.Pid
		tg.WaitLine(t, "ready", 60*time.Second)
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := only(t, c, model.FindingRuntimePause)
		if f.Runtime != "jvm" || !strings.Contains(f.Summary, "JVM safepoint") || !strings.Contains(strings.Join(f.Functions, " "), "VM_G1CollectFull") {
			t.Errorf("the JVM finding should name its safepoints and the full GC operation: %+v", f)
		}
	},
}, {
	name:  "node-event-loop",
	about: "node --perf-basic-prof testdata/node/httpblock.js (Node.js 20), its event loop held by a request to /block that runs busyLoop",
	run: func(t *testing.T) string {
		return record(t, startNodeServer(t, "--perf-basic-prof").Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := only(t, c, model.FindingEventLoopBlocked)
		if len(f.TIDs) != 1 || f.TIDs[0] != c.Info.PID || !strings.Contains(strings.Join(f.Functions, " "), "busyLoop") {
			t.Errorf("the event loop finding should name the main thread and busyLoop: %+v", f)
		}
		none(t, c, model.FindingMissingJITSymbols)
	},
}, {
	name:  "node-without-perf-map",
	about: "node testdata/node/httpblock.js (Node.js 20, no --perf-basic-prof), its event loop held by a request to /block",
	run: func(t *testing.T) string {
		return record(t, startNodeServer(t).Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := finding(t, c, model.FindingMissingJITSymbols)
		if f.Runtime != "node" || !strings.Contains(f.Detail, "--perf-basic-prof") {
			t.Errorf("the missing JIT names finding should tell to start node with --perf-basic-prof: %+v", f)
		}
		if ev := finding(t, c, model.FindingEventLoopBlocked); !strings.Contains(ev.Summary, "has no names") {
			t.Errorf("the event loop finding should say the JIT code has no names: %s", ev.Summary)
		}
	},
}, {
	name:  "python-gil",
	about: "/root/.pyenv/versions/3.12.1/bin/python3.12 -X perf testdata/stalls/gil.py 3: three threads run pure Python and take turns on the GIL",
	run: func(t *testing.T) string {
		py := "/root/.pyenv/versions/3.12.1/bin/python3.12"
		if _, err := os.Stat(py); err != nil {
			testutil.Skip(t, "no CPython 3.12 with symbols at %s: %v", py, err)
		}
		tg := testutil.StartCmd(t, exec.Command(py, "-X", "perf", testutil.Testdata(t, "stalls", "gil.py"), "3"))
		tg.WaitLine(t, "ready", 20*time.Second)
		t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)) })
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := only(t, c, model.FindingGIL)
		if f.Runtime != "python" || len(f.TIDs) < 2 || !strings.Contains(strings.Join(f.Functions, " "), "take_gil") {
			t.Errorf("the GIL finding should name the holder and the waiters in take_gil: %+v", f)
		}
		// The holder's Python function, read from the interpreter's memory.
		if !strings.Contains(f.Summary, "crunch (gil.py:") {
			t.Errorf("the GIL finding should name the holder's Python function and line: %s", f.Summary)
		}
	},
}, {
	name:  "python-gil-stripped",
	about: "/usr/bin/python3 testdata/stalls/gil.py 3: Debian's python3 (stripped: no take_gil), started with no flag, three threads taking turns on the GIL",
	run: func(t *testing.T) string {
		py := testutil.RequireTool(t, "/usr/bin/python3")
		tg := testutil.StartCmd(t, exec.Command(py, testutil.Testdata(t, "stalls", "gil.py"), "3"))
		tg.WaitLine(t, "ready", 20*time.Second)
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		// The waiters known by the futex word they sleep on and their
		// stacks, the holder by the GIL itself, its Python function and
		// line by its frames.
		f := only(t, c, model.FindingGIL)
		if f.Runtime != "python" || len(f.TIDs) < 2 {
			t.Errorf("the GIL finding should name the holder and the waiters: %+v", f)
		}
		if !strings.Contains(f.Summary, "crunch (gil.py:") || !strings.Contains(strings.Join(f.Functions, " "), "crunch") {
			t.Errorf("the GIL finding should name the holder's Python function and line: %s", f.Summary)
		}
	},
}, {
	name:  "python-blocked-read",
	about: "/usr/bin/python3 testdata/python/blocked.py: Debian's python3, its only thread blocked in os.read under wait_for_input",
	run: func(t *testing.T) string {
		py := testutil.RequireTool(t, "/usr/bin/python3")
		tg := testutil.StartCmd(t, exec.Command(py, testutil.Testdata(t, "python", "blocked.py")))
		tg.WaitLine(t, "ready", 20*time.Second)
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		// The Python function that made the system call, with its line.
		f := finding(t, c, model.FindingAllWaiting)
		if !strings.Contains(f.Detail, "wait_for_input (blocked.py:8)") || !slices.Contains(f.Functions, "wait_for_input") {
			t.Errorf("the finding should name the Python function that called read, with its line: %s %v", f.Detail, f.Functions)
		}
	},
}, {
	// CPython 3.13 -X perf_jit buffers its jitdump until exit, so the hot
	// functions' trampolines have no names; the finding says why, how
	// many, and that -X perf names them.
	name:  "python313-perf-jit",
	about: "/root/.pyenv/versions/3.13.0/bin/python3 -X perf_jit testdata/stalls/pyhot.py: pure Python busy in functions first called after start-up, whose jitdump records are still in CPython's buffer",
	run: func(t *testing.T) string {
		return record(t, startPython313(t, "perf_jit").Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		if c.Info.Counts.JITSources == 0 {
			t.Fatalf("no JIT source read: %+v", c.Info.Counts)
		}
		f := finding(t, c, model.FindingMissingJITSymbols)
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
	},
}, {
	name:  "python313-perf",
	about: "/root/.pyenv/versions/3.13.0/bin/python3 -X perf testdata/stalls/pyhot.py: the same program, its perf map written at each new function",
	run: func(t *testing.T) string {
		return record(t, startPython313(t, "perf").Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		none(t, c, model.FindingMissingJITSymbols)
	},
}, {
	name:  "spinner",
	about: "testdata/spin -threads 1: one thread burns CPU in main.spinHot",
	run: func(t *testing.T) string {
		tg := testutil.Start(t, testutil.BuildGo(t, "spin"), "-threads", "1")
		tg.WaitLine(t, "ready", 10*time.Second)
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := finding(t, c, model.FindingHotThread)
		if f.TIDs[0] != tidNamed(t, c, "spin-0") || !strings.Contains(f.Summary, "main.spinHot") {
			t.Errorf("the hot thread should be spin-0 in main.spinHot: %+v", f)
		}
		for _, k := range append(unrelated, model.FindingSpinning) {
			none(t, c, k)
		}
	},
}, {
	name:  "offcpu-spinning",
	about: "testdata/offcpu/offcpu.c -n 0 -s 1: a spinner in spin_loop while a sleeper and a piper wait; captured with a flight recorder, as at a stall",
	run: func(t *testing.T) string {
		tg := testutil.Start(t, testutil.BuildC(t, "offcpu/offcpu.c"), "-n", "0", "-s", "1")
		tg.WaitLine(t, "ready", 10*time.Second)
		// Sampled from before the trigger (a flight recorder), so that the
		// window after it is sampled whole.
		return captureNow(t, session(t, tg.Pid, capture.Config{}), model.Trigger{Kind: model.Stall, At: time.Now()})
	},
	expect: func(t *testing.T, c *report.Capture) {
		// On a quiet host the spinner is on a CPU the whole window; on a
		// busy one it may wait for a CPU: the findings follow what it got.
		spinner := tidNamed(t, c, "spinner")
		cpu, runq, _ := threadShares(c, spinner)
		t.Logf("spinner: on a CPU %.0f%%, runnable but waiting %.0f%%", 100*cpu, 100*runq)
		switch {
		case cpu >= 0.8:
			f := finding(t, c, model.FindingSpinning)
			if f.TIDs[0] != spinner || !slices.Contains(f.TIDs, tidNamed(t, c, "piper")) || !slices.Equal(f.Functions, []string{"spin_loop"}) {
				t.Errorf("the spinning finding should name the spinner in spin_loop, and the piper waiting: %+v", f)
			}
		case runq >= 0.2 && runq >= cpu:
			finding(t, c, model.FindingCPUStarvation)
		}
		for _, k := range unrelated {
			none(t, c, k)
		}
	},
}, {
	name:  "offcpu-waiting",
	about: "testdata/offcpu/offcpu.c -n 0 -s 0: a sleeper in nanosleep and a piper in read on a pipe nobody writes, nothing on a CPU",
	run: func(t *testing.T) string {
		tg := testutil.Start(t, testutil.BuildC(t, "offcpu/offcpu.c"), "-n", "0", "-s", "0")
		tg.WaitLine(t, "ready", 10*time.Second)
		for _, n := range []string{"sleeper", "piper"} {
			waitState(t, tg.Pid, liveTID(t, tg.Pid, n), "S")
		}
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		finding(t, c, model.FindingAllWaiting)
		piper := threadNamed(t, c, "piper")
		if piper.Syscall == nil || piper.Syscall.Name != "read" || !strings.Contains(topFrame(piper), "read_forever") {
			t.Errorf("the piper should be read in read_forever: %+v", piper)
		}
		for _, k := range unrelated {
			none(t, c, k)
		}
	},
}, {
	name:  "go-blocked",
	about: "testdata/goblocked: a Go goroutine locked to its thread blocked in read(2) in main.blockInRead",
	run: func(t *testing.T) string {
		tg := testutil.Start(t, testutil.BuildGo(t, "goblocked"))
		line := tg.WaitLine(t, "ready", 10*time.Second)
		var tid int
		fmt.Sscanf(line, "ready %d", &tid)
		waitState(t, tg.Pid, tid, "S")
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		var reader *model.Thread
		for i := range c.Threads.Threads {
			th := &c.Threads.Threads[i]
			if th.Syscall != nil && th.Syscall.Name == "read" {
				reader = th
			}
		}
		if reader == nil || !strings.Contains(stackText(reader), "main.blockInRead") {
			t.Fatalf("no thread of the snapshot is in read(2) in main.blockInRead: %+v", reader)
		}
		for _, k := range unrelated {
			none(t, c, k)
		}
	},
}, {
	name:  "cpu-throttled",
	about: "testdata/manythreads 0 2 (two threads spinning in spin_forever) in a v1 cpu cgroup with cpu.cfs_quota_us 5000 (5 ms every 100 ms)",
	run: func(t *testing.T) string {
		return spinInCgroup(t, "5000")
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := first(t, c, model.FindingCPUThrottled)
		if !strings.Contains(f.Summary, "5ms of CPU every 100ms (0.05 CPU)") || f.Severity != model.SeverityCritical ||
			!strings.Contains(f.Detail, "Raise the limit (cpu.cfs_quota_us") || len(f.TIDs) < 2 {
			t.Errorf("the throttling finding should say the quota and the share: %+v", f)
		}
		if th := c.Info.KernelContext.Throttling; len(th) == 0 || th[0].Share() < 0.5 {
			t.Errorf("capture.json's throttling %+v: most periods throttled", th)
		}
		none(t, c, model.FindingCPUStarvation)
	},
}, {
	name:  "cpu-unthrottled",
	about: "testdata/manythreads 0 2 (two threads spinning in spin_forever) in a v1 cpu cgroup without a quota",
	run: func(t *testing.T) string {
		return spinInCgroup(t, "")
	},
	expect: func(t *testing.T, c *report.Capture) {
		if c.Info.KernelContext == nil || len(c.Info.KernelContext.Throttling) == 0 || c.Info.KernelContext.Throttling[0].Limited {
			t.Fatalf("capture.json's kernel context should have the cgroup, without a quota: %+v", c.Info.KernelContext)
		}
		none(t, c, model.FindingCPUThrottled)
		if f, ok := findingOf(c, model.FindingCPUStarvation); ok && (strings.Contains(f.Detail, "cpu.max") || !strings.Contains(f.Detail, "no CPU quota")) {
			t.Errorf("starvation without a quota must not suggest one: %s", f.Detail)
		}
	},
}, {
	name:  "memory-reclaim",
	about: "testdata/reclaim file DATA 32 2 (two threads reading a 32 MiB file through a mapping, in touch_pages) in a v1 memory cgroup limited to 8 MiB",
	run: func(t *testing.T) string {
		return readInCgroup(t, true)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := finding(t, c, model.FindingMemoryPressure)
		fns := strings.Join(f.Functions, " ")
		if !strings.Contains(fns, "try_to_free_mem_cgroup_pages") && !strings.Contains(fns, "filemap_fault") {
			t.Errorf("the memory finding should name the cgroup's reclaim or the faults that read pages back: %+v", f)
		}
		if !strings.Contains(f.Detail, "hit its limit") || !strings.Contains(f.Detail, "raise the limit") {
			t.Errorf("the memory finding should give the limit's numbers and the fix: %s", f.Detail)
		}
	},
}, {
	name:  "memory-unlimited",
	about: "testdata/reclaim file DATA 32 2 in a v1 memory cgroup without a limit, captured once the file is in memory (after its third pass)",
	run: func(t *testing.T) string {
		return readInCgroup(t, false)
	},
	expect: func(t *testing.T, c *report.Capture) {
		none(t, c, model.FindingMemoryPressure)
	},
}, {
	name:  "waits-on-peers",
	about: "testdata/waits PATH: threads blocked in recv on TCP to a server that never answers, in write to a full pipe whose reader (logger) is stopped, in epoll_wait on three sockets, in read on UNIX sockets to another process, on a connection never accepted",
	run: func(t *testing.T) string {
		tg := testutil.Start(t, testutil.BuildC(t, "waits/waits.c"), filepath.Join(t.TempDir(), "peer.sock"))
		ids := map[string]int{}
		for _, f := range strings.Fields(tg.WaitLine(t, "ready", 20*time.Second))[1:] {
			k, v, _ := strings.Cut(f, "=")
			var n int
			fmt.Sscan(v, &n)
			ids[k] = n
		}
		if err := syscall.Kill(ids["logger"], syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(ids["logger"], syscall.SIGCONT) })
		waitState(t, ids["logger"], ids["logger"], "T")
		for _, who := range []string{"server", "unixpeer", "backlog"} {
			waitState(t, ids[who], ids[who], "S")
		}
		for _, who := range []string{"tcp", "pipe", "epoll", "unix", "backlogtid"} {
			waitState(t, tg.Pid, ids[who], "S")
		}
		return record(t, tg.Pid)
	},
	expect: func(t *testing.T, c *report.Capture) {
		f := first(t, c, model.FindingBlockedOnPeer)
		writer := tidNamed(t, c, "pipe-write")
		if f.Severity != model.SeverityCritical || !slices.Contains(f.TIDs, writer) || !strings.Contains(f.Summary, "in write on pipe:[") ||
			!strings.Contains(f.Summary, "(logger), which is stopped") || !strings.Contains(f.Detail, "kill -CONT") {
			t.Errorf("the writer of the full pipe should be blocked on the stopped logger, first: %+v", f)
		}
		want := map[string]string{"tcp-recv": "(server), sleeping", "unix-recv": "(unixpeer), sleeping", "backlog": "not yet accepted by pid"}
		for name, peer := range want {
			tid := tidNamed(t, c, name)
			found := false
			for _, g := range c.Info.Findings {
				found = found || (g.Kind == model.FindingBlockedOnPeer && slices.Contains(g.TIDs, tid) && strings.Contains(g.Summary, peer))
			}
			if !found {
				t.Errorf("no finding says %s (tid %d) waits on %q:\n%s", name, tid, peer, findingsText(c))
			}
		}
		if th := threadNamed(t, c, "epoll"); th.Wait == nil || th.Wait.On == nil || !strings.HasPrefix(th.Wait.On.Desc, "epoll set of 3 descriptors") {
			t.Errorf("the epoll thread's wait: %+v", th.Wait)
		}
	},
}}

// spinInCgroup runs two spinning threads in a new v1 cpu cgroup, with
// quota (cpu.cfs_quota_us, "" for none), and records them.
func spinInCgroup(t *testing.T, quota string) string {
	cg := testutil.NewCgroupV1(t, "cpu")
	if quota != "" {
		cg.Set(t, "cpu.cfs_quota_us", quota)
	}
	tg := testutil.StartCmd(t, cg.Command(testutil.BuildC(t, "manythreads/manythreads.c"), "0", "2"))
	tg.WaitLine(t, "ready", 10*time.Second)
	return record(t, tg.Pid)
}

// readInCgroup runs testdata/reclaim's two threads reading a 32 MiB
// mapped file in a new v1 memory cgroup, limited to 8 MiB or not, and
// records them: with the limit once they hit it, without once the file
// is in memory.
func readInCgroup(t *testing.T, limit bool) string {
	cg := testutil.NewCgroupV1(t, "memory")
	if limit {
		cg.Set(t, "memory.limit_in_bytes", fmt.Sprint(8<<20))
	}
	// The file is written here, outside the cgroup: written under a
	// tight limit, its dirty pages can get the writer OOM-killed.
	data := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(data, bytes.Repeat([]byte{'x'}, 32<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := os.Open(data); err == nil {
		f.Sync()
		f.Close()
	}
	tg := testutil.StartCmd(t, cg.Command(testutil.BuildC(t, "reclaim/reclaim.c"), "file", data, "32", "2"))
	tg.WaitLine(t, "ready", 30*time.Second)
	if !limit {
		tg.WaitLine(t, "pass 3", 60*time.Second)
	}
	return record(t, tg.Pid)
}
