package fdtarget

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// manyFDs starts processes of testdata/manyfds until the host has
// 100,000 more descriptors, and returns the first with its reader's and
// poller's descriptors. One process holds at most its hard RLIMIT_NOFILE
// (20,000 on this machine, where the tests lack CAP_SYS_RESOURCE).
func manyFDs(t testing.TB) (pid, readerFD, pollerFD, fds int) {
	testutil.RequireRoot(t)
	bin := testutil.BuildC(t, "manyfds/manyfds.c")
	total := 0
	for total < 100_000 {
		tg := testutil.Start(t, bin, strconv.Itoa(100_000-total))
		line := tg.WaitLine(t, "ready", 60*time.Second)
		f := map[string]int{}
		for _, kv := range strings.Fields(line)[1:] {
			k, v, _ := strings.Cut(kv, "=")
			f[k], _ = strconv.Atoi(v)
		}
		if pid == 0 {
			pid, fds = tg.Pid, f["fds"]
			w := &waitsTarget{Target: tg}
			readerFD = w.blockedFD(t, f["reader"], "read")
			pollerFD = w.blockedFD(t, f["poller"], "epoll_wait", "epoll_pwait")
		}
		total += f["fds"]
	}
	return pid, readerFD, pollerFD, fds
}

// TestBounded: resolving on a host of 100,000 more descriptors looks at
// no more than MaxScan of them for other ends, and resolves no more than
// MaxEpoll of an epoll set's, counting the rest.
func TestBounded(t *testing.T) {
	pid, reader, poller, fds := manyFDs(t)
	start := time.Now()
	res := Resolve(pid, []int{reader, poller}, Options{})
	t.Logf("resolved in %v: %d descriptors of %d processes scanned; notes %q", time.Since(start), res.Scanned, res.Processes, res.Notes)
	if res.Scanned > DefaultMaxScan {
		t.Errorf("scanned %d descriptors, over the bound %d", res.Scanned, DefaultMaxScan)
	}
	cut := false
	for _, n := range res.Notes {
		cut = cut || strings.Contains(n, "(the bound)")
	}
	if !cut {
		t.Errorf("the scan stopped at its bound, and no note says so: %q", res.Notes)
	}
	e := res.Targets[poller]
	if e.Epoll == nil || e.Epoll.Count != fds/2-1 || len(e.Epoll.Items) != DefaultMaxEpoll {
		t.Fatalf("epoll of %d pipes: %+v", fds/2-1, e.Epoll)
	}
	if got := e.String(); !strings.HasSuffix(got, "; and "+strconv.Itoa(fds/2-1-DefaultMaxEpoll)+" more") {
		t.Errorf("%q does not count the rest", got[max(0, len(got)-80):])
	}
	// The process itself is looked at first (it fits in half the
	// bound): its own write end of the pipe is found.
	r := res.Targets[reader]
	if !strings.Contains(r.String(), "written by this process (fd ") {
		t.Errorf("%s", r)
	}
}

// BenchmarkResolve: the wall time of resolving a blocked reader and an
// epoll set of 10,000 pipes in a process of 20,000 descriptors, on a
// host of 100,000 more (the scan for other ends stops at its bound).
func BenchmarkResolve(b *testing.B) {
	pid, reader, poller, _ := manyFDs(b)
	var res *Result
	for b.Loop() {
		res = Resolve(pid, []int{reader, poller}, Options{})
	}
	b.ReportMetric(float64(res.Scanned), "fds-scanned")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(res.Scanned), "µs/fd-scanned")
}
