package kernelctx

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"golang.org/x/sys/unix"
)

func mustRead(t *testing.T, r *Reader, threads bool) *Reading {
	t.Helper()
	rd, err := r.Read(threads)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range rd.Errs {
		t.Logf("reading pid %d: %v", rd.PID, err)
	}
	return rd
}

func requirePSI(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
		testutil.Skip(t, "no PSI here (%v): a kernel with CONFIG_PSI, booted with psi=1 where it is off by default", err)
	}
}

// spinTID is the tid of the thread manythreads names "spinner".
func spinTID(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", e.Name(), "comm"))
		if strings.TrimSpace(string(b)) == "spinner" {
			tid, _ := strconv.Atoi(e.Name())
			return tid
		}
	}
	t.Fatalf("pid %d has no spinner thread", pid)
	return 0
}

// TestThrottlingV1: two threads spinning in a v1 cgroup with 5% of a CPU
// are throttled in most periods (whatever else keeps the CPUs busy, each
// gets more than 5 ms of every 100), and the window says by which
// cgroup, its quota and period; without the quota, nothing is throttled.
func TestThrottlingV1(t *testing.T) {
	bin := testutil.BuildC(t, "manythreads/manythreads.c")
	for _, quota := range []bool{true, false} {
		t.Run(map[bool]string{true: "quota", false: "no quota"}[quota], func(t *testing.T) {
			cg := testutil.NewCgroupV1(t, "cpu")
			if quota {
				cg.Set(t, "cpu.cfs_period_us", "100000")
				cg.Set(t, "cpu.cfs_quota_us", "5000")
			}
			tg := testutil.StartCmd(t, cg.Command(bin, "0", "2"))
			tg.WaitLine(t, "ready", 30*time.Second)
			spinner := spinTID(t, tg.Pid)
			r := NewReader(tg.Pid)
			a := mustRead(t, r, true)
			// 50 ms of CPU is ten periods' quota: at least ten periods.
			used := testutil.WaitCPU(t, tg.Pid, 50*time.Millisecond, 30*time.Second)
			b := mustRead(t, r, true)
			w := Between(a, b)
			t.Logf("used %v of CPU in %v; throttling %+v", used, w.Duration, w.Throttling)
			if !hasCgroup(w, "cpu", cg.Path) {
				t.Errorf("cgroups %+v: no cpu cgroup %s", w.Cgroups, cg.Path)
			}
			if len(w.Throttling) == 0 || !w.Throttling[0].Own || w.Throttling[0].Path != cg.Path {
				t.Fatalf("throttling %+v: the process's own cgroup %s is not first", w.Throttling, cg.Path)
			}
			th := w.Throttling[0]
			if !quota {
				if th.Limited || th.Throttled != 0 || th.ThrottledTime != 0 {
					t.Errorf("no quota, yet %+v", th)
				}
				return
			}
			if !th.Limited || th.Quota != 5*time.Millisecond || th.Period != 100*time.Millisecond {
				t.Errorf("quota %+v, want 5ms every 100ms", th)
			}
			if th.Periods < 5 || th.Share() < 0.5 || th.ThrottledTime <= 0 {
				t.Errorf("two spinning threads at 5%% of a CPU, throttled in %d of %d periods (%.0f%%) for %v", th.Throttled, th.Periods, 100*th.Share(), th.ThrottledTime)
			}
			if d, ok := threadDelta(w, spinner); !ok || d.Involuntary == 0 {
				t.Errorf("the spinner (tid %d) was throttled, yet no involuntary switch: %+v", spinner, d)
			}
		})
	}
}

func hasCgroup(w *model.KernelContext, hierarchy, path string) bool {
	for _, c := range w.Cgroups {
		if c.Hierarchy == hierarchy && c.Path == path {
			return true
		}
	}
	return false
}

func threadDelta(w *model.KernelContext, tid int) (model.ThreadCounts, bool) {
	for _, d := range w.Threads {
		if d.TID == tid {
			return d, true
		}
	}
	return model.ThreadCounts{}, false
}

// TestParentQuota: the quota set on a parent cgroup throttles a process
// in a child without one, and the window names the parent.
func TestParentQuota(t *testing.T) {
	bin := testutil.BuildC(t, "manythreads/manythreads.c")
	parent := testutil.NewCgroupV1(t, "cpu")
	parent.Set(t, "cpu.cfs_quota_us", "5000")
	child := &testutil.Cgroup{Dir: filepath.Join(parent.Dir, "child"), Path: parent.Path + "/child"}
	if err := os.Mkdir(child.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testutil.Eventually(10*time.Second, func() bool { return os.Remove(child.Dir) == nil }) })
	tg := testutil.StartCmd(t, child.Command(bin, "0", "2"))
	tg.WaitLine(t, "ready", 30*time.Second)
	r := NewReader(tg.Pid)
	a := mustRead(t, r, false)
	testutil.WaitCPU(t, tg.Pid, 50*time.Millisecond, 30*time.Second)
	w := Between(a, mustRead(t, r, false))
	if len(w.Throttling) != 2 || w.Throttling[0].Limited || w.Throttling[1].Path != parent.Path || w.Throttling[1].Own {
		t.Fatalf("throttling %+v: want the child without a quota, then the parent %s", w.Throttling, parent.Path)
	}
	if p := w.Throttling[1]; p.Share() < 0.5 || p.Quota != 5*time.Millisecond {
		t.Errorf("the parent throttled in %d of %d periods, quota %v", p.Throttled, p.Periods, p.Quota)
	}
}

// TestCgroupPressureV2: three spinning threads in a v2 cgroup on a host
// of two CPUs: one of them always waits for a CPU, and the cgroup's own
// cpu.pressure says so.
func TestCgroupPressureV2(t *testing.T) {
	requirePSI(t)
	bin := testutil.BuildC(t, "manythreads/manythreads.c")
	cg := testutil.NewCgroupV2(t)
	if _, err := os.Stat(filepath.Join(cg.Dir, "cpu.pressure")); err != nil {
		testutil.Skip(t, "no per-cgroup PSI: %v (cgroup_disable=pressure?)", err)
	}
	spinners := strconv.Itoa(numCPU(t) + 1)
	tg := testutil.StartCmd(t, cg.Command(bin, "0", spinners))
	tg.WaitLine(t, "ready", 30*time.Second)
	r := NewReader(tg.Pid)
	a := mustRead(t, r, false)
	testutil.WaitCPU(t, tg.Pid, 300*time.Millisecond, 30*time.Second)
	b := mustRead(t, r, false)
	if b.CgroupPath != cg.Path {
		t.Fatalf("v2 cgroup %q, want %q", b.CgroupPath, cg.Path)
	}
	w := Between(a, b)
	p, ok := pressureOf(w, cg.Path, "cpu")
	if !ok {
		t.Fatalf("pressure %+v: none for the cgroup %s", w.Pressure, cg.Path)
	}
	t.Logf("%s spinners on %d CPUs: cgroup cpu some %v (%.0f%%) in %v", spinners, numCPU(t), p.Some.Stalled, 100*p.Some.Share, w.Duration)
	if p.Some.Stalled <= 0 || p.Some.Share < 0.2 {
		t.Errorf("more spinning threads than CPUs, yet the cgroup's cpu stall share is %.0f%%", 100*p.Some.Share)
	}
	if _, ok := pressureOf(w, "host", "memory"); !ok {
		t.Errorf("no host memory pressure in %+v", w.Pressure)
	}
}

func numCPU(t *testing.T) int {
	rd := mustRead(t, NewReader(os.Getpid()), false)
	if rd.CPUTimes.CPUs < 1 {
		t.Fatalf("/proc/stat lists no CPU")
	}
	return rd.CPUTimes.CPUs
}

func pressureOf(w *model.KernelContext, scope, resource string) (model.Pressure, bool) {
	for _, p := range w.Pressure {
		if p.Scope == scope && p.Resource == resource {
			return p, true
		}
	}
	return model.Pressure{}, false
}

// TestHostShares: the host's CPU shares over a window in which this test
// burns a CPU: busy, and every share within [0, 1], steal included (what
// the hypervisor of this machine took, from the real /proc/stat).
func TestHostShares(t *testing.T) {
	requirePSI(t)
	r := NewReader(os.Getpid())
	t0 := time.Now()
	a := mustRead(t, r, false)
	readA := time.Since(t0)
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
	}
	t1 := time.Now()
	b := mustRead(t, r, false)
	readB := time.Since(t1)
	w := Between(a, b)
	h := w.Host
	t.Logf("host over %v: busy %.1f%%, iowait %.1f%%, steal %.2f%% of %d ticks on %d CPUs", w.Duration, 100*h.Busy, 100*h.IOWait, 100*h.Steal, h.Ticks, h.CPUs)
	if h.Ticks == 0 || h.Busy <= 0 || h.CPUs < 1 {
		t.Errorf("a CPU spun for 300 ms, yet %+v", h)
	}
	for _, s := range []float64{h.Busy, h.IOWait, h.Steal} {
		if s < 0 || s > 1 || h.Busy+h.IOWait+h.Steal > 1.0001 {
			t.Errorf("shares out of range: %+v", h)
		}
	}
	if len(w.Pressure) != 3 {
		t.Errorf("host pressure %+v: want cpu, memory and io", w.Pressure)
	}
	for _, p := range w.Pressure {
		// A reading's files are read one after another: the pressure
		// totals may span its whole reading, beyond the window's clock
		// readings (a loaded host makes a reading take milliseconds).
		if p.Some.Share < 0 || p.Some.Share > 1 || p.Some.Stalled > w.Duration+readA+readB+time.Millisecond {
			t.Errorf("%s pressure %+v over %v (the readings took %v and %v)", p.Resource, p.Some, w.Duration, readA, readB)
		}
	}
}

// TestOOMKill: a process over its memory cgroup's limit, on a host
// without swap for it, is killed; the window counts the kill for the
// host and for the cgroup.
func TestOOMKill(t *testing.T) {
	bin := testutil.BuildC(t, "reclaim/reclaim.c")
	cg := testutil.NewCgroupV1(t, "memory")
	cg.Set(t, "memory.limit_in_bytes", strconv.Itoa(16<<20))
	if err := os.WriteFile(filepath.Join(cg.Dir, "memory.memsw.limit_in_bytes"), []byte(strconv.Itoa(16<<20)), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Logf("memory.memsw.limit_in_bytes: %v (swap may absorb some)", err)
	}
	// The reading's process is this test (its memory cgroup is not the
	// victim's): the host's count and the victim cgroup's, read beside it.
	r := NewReader(os.Getpid())
	a := mustRead(t, r, false)
	before := readMemCounters(t, cg)
	tg := testutil.StartCmd(t, cg.Command(bin, "anon", "64"))
	select {
	case <-tg.Done():
	case <-time.After(60 * time.Second):
		t.Fatalf("a process touching 64 MiB under a 16 MiB limit was not killed in 60 s")
	}
	w := Between(a, mustRead(t, r, false))
	after := readMemCounters(t, cg)
	if w.OOMKills < 1 {
		t.Errorf("the host counted %d OOM kills in the window", w.OOMKills)
	}
	if after.OOMKills-before.OOMKills < 1 {
		t.Errorf("the cgroup counted %d OOM kills", after.OOMKills-before.OOMKills)
	}
}

// writeData writes a file of size bytes, synced, outside any cgroup a
// test makes (written under a tight limit, its dirty pages can get the
// writer OOM-killed before writeback frees them).
func writeData(t *testing.T, size int) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "data")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{'x'}, size)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return name
}

func readMemCounters(t *testing.T, cg *testutil.Cgroup) MemCounters {
	t.Helper()
	rd := &Reading{}
	g := MemGroup{Dir: Dir{FS: cg.Dir, Path: cg.Path}}
	if !readMemGroup(rd, &g) || len(rd.Errs) > 0 {
		t.Fatalf("memory cgroup %s: %v", cg.Dir, rd.Errs)
	}
	return g.Mem
}

// TestMemoryLimitReclaim: threads reading a 32 MiB file through a
// mapping, in a memory cgroup limited to 8 MiB: charges hit the limit
// (failcnt) and pages are read back (major faults) over and over. Without
// the limit the file stays in memory after the first pass: neither.
func TestMemoryLimitReclaim(t *testing.T) {
	bin := testutil.BuildC(t, "reclaim/reclaim.c")
	for _, limit := range []bool{true, false} {
		t.Run(map[bool]string{true: "limit", false: "no limit"}[limit], func(t *testing.T) {
			cg := testutil.NewCgroupV1(t, "memory")
			if limit {
				cg.Set(t, "memory.limit_in_bytes", strconv.Itoa(8<<20))
			}
			data := writeData(t, 32<<20)
			tg := testutil.StartCmd(t, cg.Command(bin, "file", data, "32", "2"))
			tg.WaitLine(t, "ready", 60*time.Second)
			r := NewReader(tg.Pid)
			var a *Reading
			if limit {
				a = mustRead(t, r, true)
				// Enough faults to be sure of, not a whole pass (each
				// page is read from disk: slow).
				_ = testutil.Eventually(30*time.Second, func() bool {
					c := readMemCounters(t, cg)
					return c.Failcnt-a.Memory[0].Mem.Failcnt >= 200
				})
			} else {
				tg.WaitLine(t, "pass 1", 60*time.Second) // the file read in once
				a = mustRead(t, r, true)
				tg.WaitLine(t, "pass 3", 60*time.Second)
			}
			w := Between(a, mustRead(t, r, true))
			if len(w.Memory) == 0 || !w.Memory[0].Own || w.Memory[0].Path != cg.Path {
				t.Fatalf("memory %+v: the process's own cgroup %s is not first", w.Memory, cg.Path)
			}
			m := w.Memory[0]
			var faults uint64
			for _, d := range w.Threads {
				faults += d.MajorFaults
			}
			t.Logf("memory cgroup %+v; threads' major faults %d in %v", m, faults, w.Duration)
			if !limit {
				if m.Limited || m.Failcnt != 0 || faults > 64 {
					t.Errorf("no limit, yet failcnt %d and %d major faults", m.Failcnt, faults)
				}
				return
			}
			if !m.Limited || m.Limit != 8<<20 || m.Failcnt < 200 || m.Usage > m.Limit {
				t.Errorf("an 8 MiB limit: %+v", m)
			}
			if faults == 0 {
				t.Errorf("pages reclaimed under the limit, yet no thread had a major fault")
			}
		})
	}
}

// TestDiskWindow: 8 MiB written and synced to a file here shows as
// writes on the block device the file lives on (its st_dev), the device
// an I/O finding names for threads blocked on that file.
func TestDiskWindow(t *testing.T) {
	dir := t.TempDir()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	major, minor := unix.Major(st.Dev), unix.Minor(st.Dev)
	r := NewReader(os.Getpid())
	a := mustRead(t, r, false)
	var found bool
	for _, d := range a.Disks {
		found = found || (d.Major == major && d.Minor == minor)
	}
	if !found {
		testutil.Skip(t, "%s is on device %d:%d, not a block device in /proc/diskstats", dir, major, minor)
	}
	f, err := os.Create(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 8<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	w := Between(a, mustRead(t, r, false))
	for _, d := range w.Disks {
		if d.Major == major && d.Minor == minor {
			t.Logf("%s: %+v over %v", d.Name, d, w.Duration)
			// Busy is not asked to be above 0: the kernel counts io_ticks
			// in jiffies (update_io_ticks), and the I/O of a 20 ms window
			// can fall within one and count none (CI, loaded: 7 writes,
			// 1.1 ms each, Busy 0).
			if d.WriteBytes < 8<<20 || d.Writes == 0 || d.Busy < 0 || d.Busy > 1 {
				t.Errorf("8 MiB written and synced, yet %+v", d)
			}
			return
		}
	}
	t.Errorf("device %d:%d did no I/O in the window: %+v", major, minor, w.Disks)
}
