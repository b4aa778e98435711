package kernelctx

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// hostFile reads a file this machine's kernel wrote (testdata/host/README).
func hostFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "host", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		name, in string
		want     []Membership
		err      bool
	}{
		{"this machine (v1 hierarchies and v2)", string(hostFile(t, "cgroup")), []Membership{
			{ID: 9, Controllers: []string{"name=systemd"}, Path: "/"},
			{ID: 8, Controllers: []string{"pids"}, Path: "/"},
			{ID: 7, Controllers: []string{"blkio"}, Path: "/"},
			{ID: 6, Controllers: []string{"freezer"}, Path: "/"},
			{ID: 5, Controllers: []string{"devices"}, Path: "/"},
			{ID: 4, Controllers: []string{"memory"}, Path: "/process_api/48e2aa831573f08989fd5ad56177cbf2"},
			{ID: 3, Controllers: []string{"cpuset"}, Path: "/"},
			{ID: 2, Controllers: []string{"cpuacct"}, Path: "/"},
			{ID: 1, Controllers: []string{"cpu"}, Path: "/"},
			{ID: 0, Path: "/"},
		}, false},
		// cgroup-v2.rst "Processes": a v2-only host.
		{"v2 only", "0::/test-cgroup/test-cgroup-nested\n", []Membership{{ID: 0, Path: "/test-cgroup/test-cgroup-nested"}}, false},
		// A container in Kubernetes with cpu,cpuacct bound together; a
		// name with a colon stays whole.
		{"v1 joint controllers", "3:cpu,cpuacct:/kubepods/burstable/pod1:ctr\n0::/\n", []Membership{
			{ID: 3, Controllers: []string{"cpu", "cpuacct"}, Path: "/kubepods/burstable/pod1:ctr"},
			{ID: 0, Path: "/"},
		}, false},
		// A cgroup name holding a newline forges a second line for its
		// hierarchy: the first is believed.
		{"forged line", "0::/a/x\n0::/other\n", []Membership{{ID: 0, Path: "/a/x"}}, false},
		{"garbage", "hello\n:x\n-1::/\n", nil, true},
		{"empty", "", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcCgroup([]byte(tt.in))
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseMountinfoAndLocate(t *testing.T) {
	mounts := ParseMountinfo(hostFile(t, "mountinfo"))
	if len(mounts) != 10 {
		t.Fatalf("%d cgroup mounts, want 10 (9 v1, 1 v2): %+v", len(mounts), mounts)
	}
	ms, err := ParseProcCgroup(hostFile(t, "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{
		4: "/sys/fs/cgroup/memory/process_api/48e2aa831573f08989fd5ad56177cbf2",
		1: "/sys/fs/cgroup/cpu",
		0: "/sys/fs/cgroup/unified",
		9: "/sys/fs/cgroup/systemd",
	}
	for _, m := range ms {
		d, ok := Locate(m, mounts)
		if !ok {
			t.Errorf("%+v: not located", m)
			continue
		}
		if w, ok := want[m.ID]; ok && d.FS != w {
			t.Errorf("%+v: at %s, want %s", m, d.FS, w)
		}
	}
	mem, _ := Locate(ms[5], mounts)
	up, ok := mem.Parent()
	if !ok || up.FS != "/sys/fs/cgroup/memory/process_api" || up.Path != "/process_api" {
		t.Errorf("parent of %+v = %+v, %v", mem, up, ok)
	}
	top, ok := up.Parent()
	if !ok || top.FS != "/sys/fs/cgroup/memory" || top.Path != "/" {
		t.Errorf("parent of %+v = %+v, %v", up, top, ok)
	}
	if _, ok := top.Parent(); ok {
		t.Errorf("the root has a parent")
	}
}

func TestLocateInContainer(t *testing.T) {
	// proc.rst 3.5's line shape; a container's cgroup2 mount shows its
	// own subtree (root field), with a space escaped in the mount point.
	info := "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n" +
		"40 31 0:38 /kubepods/pod1/ctr /sys/fs/cgroup\\040x rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n" +
		"41 31 0:39 /kubepods/pod1/ctr /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct\n"
	mounts := ParseMountinfo([]byte(info))
	if len(mounts) != 2 || mounts[0].Point != "/sys/fs/cgroup x" || !mounts[0].V2 ||
		!reflect.DeepEqual(mounts[1].Controllers, []string{"cpu", "cpuacct"}) {
		t.Fatalf("mounts = %+v", mounts)
	}
	tests := []struct {
		m      Membership
		fs     string
		parent bool
		ok     bool
	}{
		{Membership{Path: "/kubepods/pod1/ctr/worker"}, "/sys/fs/cgroup x/worker", true, true},
		{Membership{Path: "/kubepods/pod1/ctr"}, "/sys/fs/cgroup x", false, true},
		{Membership{Path: "/kubepods/pod2"}, "", false, false},
		{Membership{Path: "/../../elsewhere"}, "", false, false},
		{Membership{ID: 3, Controllers: []string{"cpuacct", "cpu"}, Path: "/kubepods/pod1/ctr"}, "/sys/fs/cgroup/cpu,cpuacct", false, true},
		{Membership{ID: 4, Controllers: []string{"memory"}, Path: "/kubepods/pod1/ctr"}, "", false, false},
	}
	for _, tt := range tests {
		d, ok := Locate(tt.m, mounts)
		if ok != tt.ok || d.FS != tt.fs {
			t.Errorf("Locate(%+v) = %q, %v; want %q, %v", tt.m, d.FS, ok, tt.fs, tt.ok)
			continue
		}
		if _, ok := d.Parent(); ok && ok != tt.parent {
			t.Errorf("%+v: a parent above the mount's root", tt.m)
		}
	}
}

func TestParseCPUStat(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want CPUStat
	}{
		{"v1 throttled (this machine)", hostFile(t, "v1-cpu.stat-throttled"),
			CPUStat{Bandwidth: true, Periods: 21, Throttled: 20, ThrottledTime: 1370476621}},
		{"v1 root (this machine)", hostFile(t, "v1-cpu.stat-root"), CPUStat{Bandwidth: true}},
		{"v2 without the cpu controller (this machine)", hostFile(t, "v2-cpu.stat-root"),
			CPUStat{Usage: 1407643669 * time.Microsecond}},
		// cgroup-v2.rst cpu.stat: the usage stats always, the bandwidth
		// ones with the controller; times in microseconds.
		{"v2 with the controller (cgroup-v2.rst)", []byte("usage_usec 1000\nuser_usec 600\nsystem_usec 400\nnr_periods 50\nnr_throttled 10\nthrottled_usec 250000\nnr_bursts 1\nburst_usec 300\n"),
			CPUStat{Usage: time.Millisecond, Bandwidth: true, Periods: 50, Throttled: 10, ThrottledTime: 250 * time.Millisecond, Bursts: 1, BurstTime: 300 * time.Microsecond}},
		{"garbage", []byte("nr_periods -1\nnr_throttled x\nthrottled_usec 99999999999999999999\n"), CPUStat{}},
		{"saturates", []byte("throttled_usec 18446744073709551615\n"), CPUStat{ThrottledTime: 1<<63 - 1}},
	}
	for _, tt := range tests {
		if got := ParseCPUStat(tt.in); got != tt.want {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestParseQuota(t *testing.T) {
	tests := []struct {
		name          string
		max           string // v2 cpu.max
		quota, period string // v1
		want          Quota
		err           bool
	}{
		{name: "v2 default (cgroup-v2.rst)", max: "max 100000\n", want: Quota{Period: 100 * time.Millisecond}},
		{name: "v2 half a CPU", max: "50000 100000\n", want: Quota{Limited: true, Quota: 50 * time.Millisecond, Period: 100 * time.Millisecond}},
		{name: "v2 with burst field", max: "20000 100000 0\n", want: Quota{Limited: true, Quota: 20 * time.Millisecond, Period: 100 * time.Millisecond}},
		{name: "v2 one field", max: "max\n", err: true},
		{name: "v2 zero period", max: "max 0\n", err: true},
		{name: "v2 negative", max: "-5 100000\n", err: true},
		{name: "v1 none (this machine)", quota: "-1\n", period: "100000\n", want: Quota{Period: 100 * time.Millisecond}},
		{name: "v1 a fifth of a CPU", quota: "20000\n", period: "100000\n", want: Quota{Limited: true, Quota: 20 * time.Millisecond, Period: 100 * time.Millisecond}},
		{name: "v1 bad period", quota: "20000\n", period: "\n", err: true},
		{name: "v1 bad quota", quota: "lots\n", period: "100000\n", err: true},
	}
	for _, tt := range tests {
		var q Quota
		var err error
		if tt.max != "" {
			q, err = ParseCPUMax([]byte(tt.max))
		} else {
			q, err = ParseCFSQuota([]byte(tt.quota), []byte(tt.period))
		}
		if (err != nil) != tt.err || q != tt.want {
			t.Errorf("%s: %+v, %v; want %+v, error %v", tt.name, q, err, tt.want, tt.err)
		}
	}
	if c := (Quota{Limited: true, Quota: 20 * time.Millisecond, Period: 100 * time.Millisecond}).CPUs(); c != 0.2 {
		t.Errorf("CPUs = %v, want 0.2", c)
	}
}

func TestParsePressure(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want PSI
		err  bool
	}{
		// psi.rst: the CPU file of old kernels has "some" alone.
		{"psi.rst cpu", []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), PSI{}, false},
		{"psi.rst memory", []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), PSI{HasFull: true}, false},
		{"this machine's cpu", hostFile(t, "pressure-cpu"), PSI{
			Some: Stall{Avg10: 65.37, Avg60: 32.74, Avg300: 34.55, Total: 383995363 * time.Microsecond}, HasFull: true}, false},
		{"this machine's io", hostFile(t, "pressure-io"), PSI{
			Some: Stall{Avg10: 3.91, Avg60: 3.77, Avg300: 8.26, Total: 101343129 * time.Microsecond},
			Full: Stall{Avg10: 1.00, Avg60: 1.92, Avg300: 4.05, Total: 58661545 * time.Microsecond}, HasFull: true}, false},
		{"no some", []byte("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), PSI{}, true},
		{"short", []byte("some avg10=0.00 total=5\n"), PSI{}, true},
		{"over 100%", []byte("some avg10=101.00 avg60=0.00 avg300=0.00 total=0\n"), PSI{}, true},
		{"NaN", []byte("some avg10=NaN avg60=0.00 avg300=0.00 total=0\n"), PSI{}, true},
		{"negative total", []byte("some avg10=0.00 avg60=0.00 avg300=0.00 total=-1\n"), PSI{}, true},
	}
	for _, tt := range tests {
		got, err := ParsePressure(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("%s: %+v, %v; want %+v, error %v", tt.name, got, err, tt.want, tt.err)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	c, err := ParseProcStat(hostFile(t, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	want := CPUTimes{User: 111778, Nice: 167, System: 28547, Idle: 125485, IOWait: 10095, IRQ: 0, SoftIRQ: 267, Steal: 447, CPUs: 2}
	if c != want {
		t.Errorf("got %+v, want %+v", c, want)
	}
	// proc.rst 1.7's example, its first lines.
	c, err = ParseProcStat([]byte("cpu  237902850 368826709 106375398 1873517540 1135548 0 14507935 0 0 0\n" +
		"cpu0 60045249 91891769 26331539 468411416 495718 0 5739640 0 0 0\n" +
		"cpu1 59746288 91759249 26609887 468860630 312281 0 4384817 0 0 0\n" +
		"intr 1462898 [... lots more numbers ...]\nctxt 1990473\n"))
	if err != nil || c.Steal != 0 || c.IOWait != 1135548 || c.SoftIRQ != 14507935 || c.CPUs != 2 {
		t.Errorf("proc.rst line: %+v, %v", c, err)
	}
	for _, bad := range []string{"", "intr 5\n", "cpu 1 2 3\n", "cpu 1 2 3 4 5 6 7 x\n"} {
		if _, err := ParseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseVMStat(t *testing.T) {
	v := ParseVMStat(hostFile(t, "vmstat"))
	want := VMStat{MajorFaults: 6345, RefaultFile: 512761}
	if v != want {
		t.Errorf("this machine: %+v, want %+v", v, want)
	}
	// Before Linux 4.10 allocstall was one counter; after, one per zone.
	if v := ParseVMStat([]byte("allocstall 7\noom_kill 2\n")); v.AllocStalls != 7 || v.OOMKills != 2 {
		t.Errorf("old kernel: %+v", v)
	}
	if v := ParseVMStat([]byte("allocstall_dma32 3\nallocstall_normal 4\ncompact_stall 1\npswpin 9\n")); v.AllocStalls != 7 || v.CompactStalls != 1 || v.SwapIns != 9 {
		t.Errorf("per zone: %+v", v)
	}
}

func TestParseMemory(t *testing.T) {
	var c MemCounters
	ParseOOMControl(hostFile(t, "v1-memory.oom_control"), &c)
	ParseMemoryStat(hostFile(t, "v1-memory.stat"), &c)
	if c != (MemCounters{}) {
		t.Errorf("this machine's root memory cgroup: %+v", c)
	}
	// cgroup-v2.rst memory.events and memory.stat.
	ParseMemoryEvents([]byte("low 0\nhigh 12\nmax 40\noom 2\noom_kill 1\noom_group_kill 0\n"), &c)
	ParseMemoryStat([]byte("anon 1024\nfile 4096\npgmajfault 31\npgscan_direct 700\npgsteal_direct 650\n"), &c)
	if c.HighEvents != 12 || c.MaxEvents != 40 || c.OOMKills != 1 || c.MajorFaults != 31 || c.ScanDirect != 700 || c.StealDirect != 650 {
		t.Errorf("v2: %+v", c)
	}
	ParseOOMControl([]byte("oom_kill_disable 1\nunder_oom 1\noom_kill 3\n"), &c)
	if !c.UnderOOM || c.OOMKills != 3 {
		t.Errorf("v1 under OOM: %+v", c)
	}
	for _, tt := range []struct {
		in      string
		v2      bool
		limit   uint64
		limited bool
		err     bool
	}{
		{"9223372036854771712\n", false, 9223372036854771712, false, false},
		{"16777216\n", false, 16777216, true, false},
		{"max\n", true, 0, false, false},
		{"16777216\n", true, 16777216, true, false},
		{"lots\n", true, 0, false, true},
		{"-1\n", false, 0, false, true},
	} {
		parse := ParseV1Limit
		if tt.v2 {
			parse = ParseV2Limit
		}
		l, ok, err := parse([]byte(tt.in))
		if l != tt.limit || ok != tt.limited || (err != nil) != tt.err {
			t.Errorf("limit %q (v2 %v) = %d, %v, %v", strings.TrimSpace(tt.in), tt.v2, l, ok, err)
		}
	}
}

func TestParseThreadCounters(t *testing.T) {
	min, maj, ok := parseStatFaults(hostFile(t, "task-stat"))
	if !ok || min != 27570 || maj != 0 {
		t.Errorf("this machine's stat: minflt %d majflt %d ok %v", min, maj, ok)
	}
	// A name with spaces and parentheses does not shift the fields.
	min, maj, ok = parseStatFaults([]byte("1778 (a) b (c) S 1776 1776 1051 0 -1 4194304 125 0 3 0 7 9 0 0 20 0 1 0 21416\n"))
	if !ok || min != 125 || maj != 3 {
		t.Errorf("stat with a tricky name: %d %d %v", min, maj, ok)
	}
	if _, _, ok := parseStatFaults([]byte("1778 (x) S 1 2 3")); ok {
		t.Errorf("a short stat line parsed")
	}
	vol, invol, ok := parseSwitches(hostFile(t, "task-status"))
	if !ok || vol != 583 || invol != 315 {
		t.Errorf("this machine's status: %d %d %v", vol, invol, ok)
	}
	// The counters are the file's last lines: the last of each is read.
	vol, invol, ok = parseSwitches([]byte("Name:\tx\nvoluntary_ctxt_switches:\t1\n\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n"))
	if !ok || vol != 12 || invol != 3 {
		t.Errorf("status: %d %d %v", vol, invol, ok)
	}
}

func TestParseDiskstats(t *testing.T) {
	ds := ParseDiskstats(hostFile(t, "diskstats"))
	if len(ds) != 10 {
		t.Fatalf("%d devices, want 10", len(ds))
	}
	vda := ds[8]
	want := DiskStat{Major: 254, Minor: 0, Name: "vda", Reads: 339909, SectorsRead: 10231594, Writes: 125474, SectorsWrite: 18509656,
		InFlight: 0, IOTicks: 562212 * time.Millisecond, QueueTime: 18442329 * time.Millisecond}
	if vda != want {
		t.Errorf("vda %+v, want %+v", vda, want)
	}
	// iostats.rst: kernels before 4.18 print 14 fields (no discards).
	old := ParseDiskstats([]byte("   3    0   hda 446216 784926 9550688 4382310 424847 312726 5922052 19310380 0 3376340 23705160\n   8    0 sda 1 2 3 4 5 6 7 8 9 10 11\n"))
	if len(old) != 2 || old[0].Name != "hda" || old[0].IOTicks != 3376340*time.Millisecond || old[1].QueueTime != 11*time.Millisecond {
		t.Errorf("14-field lines: %+v", old)
	}
	if d := ParseDiskstats([]byte("8 0 sda 1 2 3\nx 0 sdb 1 2 3 4 5 6 7 8 9 10 11\n")); len(d) != 0 {
		t.Errorf("malformed lines parsed: %+v", d)
	}
}
