package snapshot

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// builds caches the targets built by this package's tests: one build per
// run, not per test.
var builds struct {
	sync.Mutex
	bins map[string]string
}

func buildC(t *testing.T, src string) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	if p, ok := builds.bins[src]; ok {
		return p
	}
	p := testutil.BuildC(&keepTB{T: t}, src)
	if builds.bins == nil {
		builds.bins = map[string]string{}
	}
	builds.bins[src] = p
	return p
}

// keepTB gives BuildC a temporary directory that outlives the test that
// built it (removed when the package's tests end, see TestMain).
type keepTB struct{ *testing.T }

func (k *keepTB) TempDir() string { return sharedDir }

// readyLine parses "ready k=v k=v ..." into a map of ints.
func readyLine(t *testing.T, line string) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, f := range strings.Fields(line)[1:] {
		k, v, ok := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			t.Fatalf("bad ready line %q", line)
		}
		m[k] = n
	}
	return m
}

// waitBlocked waits until tid sleeps in system call nr.
func waitBlocked(t *testing.T, pid, tid, nr int) {
	t.Helper()
	err := testutil.Eventually(10*time.Second, func() bool {
		sc, err := procfs.ReadSyscall(pid, tid)
		return err == nil && !sc.Running && sc.Nr == nr
	})
	if err != nil {
		sc, _ := procfs.ReadSyscall(pid, tid)
		t.Fatalf("thread %d never blocked in syscall %d (now %+v)", tid, nr, sc)
	}
}

// assertReleased checks that no thread of pid is stopped or traced.
func assertReleased(t *testing.T, pid int) {
	t.Helper()
	tids, err := procfs.Threads(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		err := testutil.Eventually(2*time.Second, func() bool {
			st, err := procfs.ReadStatus(pid, tid)
			return err != nil || (st.TracerPid == 0 && st.State != 't')
		})
		if err != nil {
			st, _ := procfs.ReadStatus(pid, tid)
			t.Errorf("thread %d left traced or stopped: state %c, TracerPid %d", tid, st.State, st.TracerPid)
		}
	}
}

// progressOf reads the deadlock target's progress lines.
func progressOf(t *testing.T, tg *testutil.Target) uint64 {
	t.Helper()
	line := tg.WaitLine(t, "progress ", 10*time.Second)
	n, err := strconv.ParseUint(strings.TrimPrefix(line, "progress "), 10, 64)
	if err != nil {
		t.Fatalf("bad progress line %q", line)
	}
	return n
}

// assertProgress checks that the target's counter still moves.
func assertProgress(t *testing.T, tg *testutil.Target) {
	t.Helper()
	a := progressOf(t, tg)
	var b uint64
	for i := 0; i < 3 && b <= a; i++ {
		b = progressOf(t, tg)
	}
	if b <= a {
		t.Errorf("progress counter stuck at %d after the snapshot", a)
	}
}

func take(t *testing.T, pid int, opts Options) *model.Snapshot {
	t.Helper()
	snap, err := Take(context.Background(), pid, opts)
	if err != nil {
		t.Fatalf("Take(%d): %v", pid, err)
	}
	for _, n := range snap.Notes {
		t.Logf("note: %s", n)
	}
	return snap
}

func threadOf(t *testing.T, snap *model.Snapshot, tid int) *model.Thread {
	t.Helper()
	for i := range snap.Threads {
		if snap.Threads[i].TID == tid {
			return &snap.Threads[i]
		}
	}
	t.Fatalf("thread %d is not in the snapshot", tid)
	return nil
}

// userNames lists the functions of a user stack, inlined ones included,
// innermost first.
func userNames(th *model.Thread) []string {
	var out []string
	for _, l := range th.User {
		for _, ln := range l.Lines {
			out = append(out, ln.Function)
		}
	}
	return out
}

// userLines lists the lines of a user stack, inlined ones included,
// innermost first.
func userLines(th *model.Thread) []model.Line {
	var out []model.Line
	for _, l := range th.User {
		out = append(out, l.Lines...)
	}
	return out
}

// hasInOrder reports whether names holds want in this order (not
// necessarily adjacent). A want starting with ~ matches a name holding
// the rest.
func hasInOrder(names []string, want ...string) bool {
	i := 0
	for _, n := range names {
		if i < len(want) && (n == want[i] || strings.HasPrefix(want[i], "~") && strings.Contains(n, want[i][1:])) {
			i++
		}
	}
	return i == len(want)
}
