package snapshot

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// TestNodeBlocked: Node.js with --perf-prof, its main thread blocked in
// Atomics.wait inside handleRequest → waitForLock: the snapshot names the
// JavaScript functions (from the jitdump), both read without a stop (we
// are node's parent) and under a ptrace stop (from a helper process that
// is not).
func TestNodeBlocked(t *testing.T) {
	t.Parallel() // tests that set testHookStopped are not parallel
	testutil.RequirePtrace(t)
	node := testutil.RequireTool(t, "node")
	cmd := exec.Command(node, "--perf-prof", "--interpreted-frames-native-stack", "--no-turbo-inlining", testutil.Testdata(t, "node", "block.js"), "atomics")
	cmd.Dir = t.TempDir() // the jitdump goes to the working directory
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "blocking atomics", 30*time.Second)
	waitBlocked(t, tg.Pid, tg.Pid, sysFutex)

	want := []string{"~waitForLock", "~handleRequest"}
	snap := take(t, tg.Pid, Options{})
	main := threadOf(t, snap, tg.Pid)
	if names := userNames(main); !hasInOrder(names, want...) {
		t.Errorf("main thread without a stop (%s): %v, want %v", main.Unwinder, names, want)
	}

	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+helperTake, "SNAPSHOT_TEST_PID="+strconv.Itoa(tg.Pid))
	out, err := helper.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var hs helperSnapshot
	if err := json.Unmarshal(out, &hs); err != nil {
		t.Fatal(err)
	}
	var hm *helperThread
	for i := range hs.Threads {
		if hs.Threads[i].TID == tg.Pid {
			hm = &hs.Threads[i]
		}
	}
	if hm == nil || !hm.Stopped || !hasInOrder(hm.User, want...) {
		t.Errorf("main thread under ptrace: %+v, want stopped and %v", hm, want)
	}
	assertReleased(t, tg.Pid)
}

// TestNodeJSFrames: Node.js started with no flag, its main thread inside
// outer → middle → inner → block (Atomics.wait) or spin (a busy loop),
// after writing the stack V8 gives of that moment (new Error().stack) to
// a file. The snapshot names every JavaScript frame of the main thread in
// place of "[anon] 0x…" and the interpreter's frames, as V8's own stack
// trace does, in order: read without a stop (the thread sleeps in the
// kernel; we are its parent) and under a ptrace stop (from a helper that
// is not), and for the spinning thread, which only a stop can read, as
// interpreted code and as the optimized code of a warmed-up chain; and
// in a worker thread, its own isolate.
func TestNodeJSFrames(t *testing.T) {
	testutil.RequirePtrace(t)
	node := testutil.RequireTool(t, "node")
	for _, tc := range []struct {
		name, mode, how string
		stop            bool
	}{
		{"blocked, no stop", "block", "", false},
		{"blocked, stopped", "block", "", true},
		{"blocked, optimized and inlined, stopped", "block", "warm", true},
		{"spinning, stopped", "spin", "", true},
		{"spinning, optimized, stopped", "spin", "warm", true},
		{"blocked in a worker thread, stopped", "block", "worker", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stackFile := filepath.Join(t.TempDir(), "stack")
			script := testutil.Testdata(t, "node", "jsstack.js")
			tg := testutil.StartCmd(t, exec.Command(node, script, stackFile, tc.mode, tc.how))
			if tc.mode == "block" {
				tg.WaitLine(t, "blocking", 60*time.Second)
				if tc.how != "worker" {
					waitBlocked(t, tg.Pid, tg.Pid, sysFutex)
				}
			} else {
				tg.WaitLine(t, "spinning", 60*time.Second)
				testutil.WaitCPU(t, tg.Pid, 200*time.Millisecond, 30*time.Second)
			}
			var lines []model.Line
			if tc.stop {
				// The thread that runs block: the main thread, or the
				// worker's.
				err := testutil.Eventually(30*time.Second, func() bool {
					for _, th := range helperTakeSnapshot(t, tg.Pid).Threads {
						js := jsLines(th.Lines)
						if len(js) > 0 && js[0].Function == "block" || th.TID == tg.Pid && tc.how != "worker" {
							if !th.Stopped {
								t.Fatalf("thread %d not stopped: %+v", th.TID, th)
							}
							lines = th.Lines
							t.Logf("thread %d stopped %v at most, %v at least (JavaScript read in the stop)", th.TID, th.Stop, th.StopHeld)
							return true
						}
					}
					return false
				})
				if err != nil {
					t.Fatal("no thread's stack runs block")
				}
			} else {
				lines = userLines(threadOf(t, take(t, tg.Pid, Options{}), tg.Pid))
			}
			compareJS(t, jsLines(lines), testutil.ReadErrorStack(t, stackFile), script)
			assertReleased(t, tg.Pid)
		})
	}
}

// helperTakeSnapshot has a helper process (not the target's parent, so it
// may stop its main thread) take a snapshot of pid.
func helperTakeSnapshot(t *testing.T, pid int) helperSnapshot {
	t.Helper()
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"="+helperTake, "SNAPSHOT_TEST_PID="+strconv.Itoa(pid))
	out, err := helper.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var hs helperSnapshot
	if err := json.Unmarshal(out, &hs); err != nil {
		t.Fatal(err)
	}
	return hs
}

// jsLines are the lines of a stack that name JavaScript: of a script of
// the program's or of Node.js's own.
func jsLines(lines []model.Line) []model.Line {
	var out []model.Line
	for _, l := range lines {
		if strings.HasSuffix(l.File, ".js") || strings.HasPrefix(l.File, "node:") {
			out = append(out, l)
		}
	}
	return out
}

// compareJS checks the JavaScript lines of a stack against V8's own
// stack trace of the same moment: the same functions, scripts and lines,
// in order. Outside the test's own script an anonymous function may be
// named in the trace by the receiver it was called on (a worker's
// Module._compile), which no frame holds.
func compareJS(t *testing.T, got []model.Line, want []testutil.JSFrame, script string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(want); i++ {
		named := testutil.SameJSName(got[i].Function, want[i].Name) || got[i].Function == "(anonymous)" && want[i].Script != script
		ok = got[i].File == want[i].Script && got[i].Line == int64(want[i].Line) && named
	}
	if !ok {
		var b strings.Builder
		for _, l := range got {
			fmt.Fprintf(&b, "  %s (%s:%d)\n", l.Function, l.File, l.Line)
		}
		b.WriteString("V8's:\n")
		for _, f := range want {
			fmt.Fprintf(&b, "  %s (%s:%d)\n", f.Name, f.Script, f.Line)
		}
		t.Errorf("the snapshot's JavaScript frames differ from V8's stack:\n%s", b.String())
	}
}
