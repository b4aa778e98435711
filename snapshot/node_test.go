package snapshot

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
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
