package kernelctx

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// heapBound is what a parser may allocate beyond a few times its input:
// the fuzzing worker's own allocations count too (testutil.HeapBytes).
const heapBound = 4 << 20

func addHostFiles(f *testing.F, names ...string) {
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata", "host", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzParseProcCgroup(f *testing.F) {
	addHostFiles(f, "cgroup")
	f.Fuzz(func(t *testing.T, b []byte) {
		var ms []Membership
		used := testutil.HeapBytes(func() { ms, _ = ParseProcCgroup(b) })
		if used > uint64(16*len(b))+heapBound {
			t.Fatalf("%d bytes allocated for %d bytes of input", used, len(b))
		}
		seen := map[int]bool{}
		for _, m := range ms {
			if !strings.HasPrefix(m.Path, "/") || m.ID < 0 || seen[m.ID] {
				t.Fatalf("membership %+v (seen before: %v)", m, seen[m.ID])
			}
			seen[m.ID] = true
		}
		if len(ms) > maxCgroupLines {
			t.Fatalf("%d memberships", len(ms))
		}
	})
}

// FuzzLocate: whatever mountinfo and cgroup files say, a cgroup's
// directory is on the mount that shows it, never above or beside it, and
// so are its parents.
func FuzzLocate(f *testing.F) {
	mi, err := os.ReadFile(filepath.Join("testdata", "host", "mountinfo"))
	if err != nil {
		f.Fatal(err)
	}
	cg, err := os.ReadFile(filepath.Join("testdata", "host", "cgroup"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(mi, cg)
	f.Add([]byte("40 31 0:38 /kubepods/pod1/ctr /sys/fs/cgroup\\040x rw - cgroup2 cgroup2 rw\n"), []byte("0::/kubepods/pod1/ctr/../../../etc\n"))
	f.Fuzz(func(t *testing.T, mountinfo, cgroup []byte) {
		mounts := ParseMountinfo(mountinfo)
		for _, m := range mounts {
			if !strings.HasPrefix(m.Point, "/") || !strings.HasPrefix(m.Root, "/") || (!m.V2 && len(m.Controllers) == 0) {
				t.Fatalf("mount %+v", m)
			}
		}
		ms, _ := ParseProcCgroup(cgroup)
		for _, m := range ms {
			d, ok := Locate(m, mounts)
			for i := 0; ok && i < maxDepth; i++ {
				point := path.Clean(d.Mount.Point)
				if fs := path.Clean(d.FS); fs != point && !strings.HasPrefix(fs, strings.TrimSuffix(point, "/")+"/") {
					t.Fatalf("cgroup %q located at %q, outside its mount %q", m.Path, d.FS, d.Mount.Point)
				}
				d, ok = d.Parent()
			}
		}
	})
}

func FuzzParseCPU(f *testing.F) {
	addHostFiles(f, "v1-cpu.stat-throttled", "v1-cpu.stat-root", "v2-cpu.stat-root")
	f.Add([]byte("max 100000\n"))
	f.Add([]byte("50000 100000 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := ParseCPUStat(b)
		if s.Usage < 0 || s.ThrottledTime < 0 || s.BurstTime < 0 {
			t.Fatalf("negative time: %+v", s)
		}
		if q, err := ParseCPUMax(b); err == nil && (q.Period <= 0 || q.Quota < 0 || (!q.Limited && q.Quota != 0) || q.CPUs() < 0) {
			t.Fatalf("cpu.max %q = %+v", b, q)
		}
		quota, period, _ := strings.Cut(string(b), "\n")
		if q, err := ParseCFSQuota([]byte(quota), []byte(period)); err == nil && (q.Period <= 0 || q.Quota < 0) {
			t.Fatalf("cfs quota %q = %+v", b, q)
		}
	})
}

func FuzzParsePressure(f *testing.F) {
	addHostFiles(f, "pressure-cpu", "pressure-memory", "pressure-io")
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParsePressure(b)
		if err != nil {
			if p != (PSI{}) {
				t.Fatalf("error %v with a result %+v", err, p)
			}
			return
		}
		for _, s := range []Stall{p.Some, p.Full} {
			for _, avg := range []float64{s.Avg10, s.Avg60, s.Avg300} {
				if !(avg >= 0 && avg <= 100) {
					t.Fatalf("average %v out of [0, 100]: %+v", avg, p)
				}
			}
			if s.Total < 0 {
				t.Fatalf("negative total: %+v", p)
			}
		}
		if !p.HasFull && p.Full != (Stall{}) {
			t.Fatalf("a full line's numbers without one: %+v", p)
		}
	})
}

func FuzzParseHost(f *testing.F) {
	addHostFiles(f, "stat", "vmstat", "diskstats")
	f.Fuzz(func(t *testing.T, b []byte) {
		var c CPUTimes
		var err error
		var disks []DiskStat
		used := testutil.HeapBytes(func() {
			c, err = ParseProcStat(b)
			_ = ParseVMStat(b)
			disks = ParseDiskstats(b)
		})
		for _, d := range disks {
			if d.IOTicks < 0 || d.QueueTime < 0 || d.Name == "" {
				t.Fatalf("disk %+v", d)
			}
		}
		if used > uint64(8*len(b))+heapBound {
			t.Fatalf("%d bytes allocated for %d bytes of input", used, len(b))
		}
		if err != nil {
			return
		}
		for _, v := range []uint64{c.User, c.Nice, c.System, c.Idle, c.IOWait, c.IRQ, c.SoftIRQ, c.Steal} {
			if c.Total() < v {
				t.Fatalf("total %d below a part %d: %+v", c.Total(), v, c)
			}
		}
		// A window between a reading and itself is empty, whatever it holds.
		w := &window{&model.KernelContext{}}
		w.host(c, c)
		if w.Host.Steal != 0 || w.Host.IOWait != 0 || w.Host.Busy != 0 {
			t.Fatalf("a window of no time: %+v", w.Host)
		}
	})
}

func FuzzParseMemory(f *testing.F) {
	addHostFiles(f, "v1-memory.oom_control", "v1-memory.stat")
	f.Add([]byte("low 0\nhigh 12\nmax 40\noom 2\noom_kill 1\noom_group_kill 0\n"))
	f.Add([]byte("max\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c MemCounters
		ParseOOMControl(b, &c)
		ParseMemoryEvents(b, &c)
		ParseMemoryStat(b, &c)
		if l, ok, err := ParseV2Limit(b); err != nil && (l != 0 || ok) {
			t.Fatalf("error %v with limit %d, %v", err, l, ok)
		}
		if l, ok, err := ParseV1Limit(b); err == nil && ok != (l < v1Unlimited) {
			t.Fatalf("limit %d limited %v", l, ok)
		}
	})
}

func FuzzParseThread(f *testing.F) {
	addHostFiles(f, "task-stat", "task-status")
	f.Fuzz(func(t *testing.T, b []byte) {
		used := testutil.HeapBytes(func() {
			parseStatFaults(b)
			parseSwitches(b)
		})
		if used > uint64(4*len(b))+heapBound {
			t.Fatalf("%d bytes allocated for %d bytes of input", used, len(b))
		}
	})
}
