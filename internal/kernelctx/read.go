package kernelctx

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"syscall"
	"time"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Reading is the kernel's counters about one process and its host at one
// moment. Two of them make a model.KernelContext (Between).
type Reading struct {
	PID  int
	Mono uint64 // CLOCK_MONOTONIC ns, when the reading began
	Time time.Time
	// Cgroups is the process's membership in each hierarchy.
	Cgroups []Membership
	// CPU is the process's cgroup in the hierarchy that has the cpu
	// controller and each cgroup above it that a mount here shows,
	// innermost first; Memory the same for the memory controller.
	CPU    []CPUGroup
	Memory []MemGroup
	// Host is the pressure of the whole host (/proc/pressure), Cgroup
	// that of the process's v2 cgroup when it is not the root; CgroupPath
	// names it. Either is nil where the kernel has no PSI (CONFIG_PSI off,
	// psi=0).
	Host, Cgroup *Pressures
	CgroupPath   string
	// CPUTimes, VM and Disks are the host's /proc/stat, /proc/vmstat and
	// /proc/diskstats.
	CPUTimes CPUTimes
	VM       VMStat
	Disks    []DiskStat
	// Threads are the process's threads' counters, when asked for.
	Threads []ThreadCounters
	// Errs says what could not be read or parsed, one entry per file
	// (each error names its file).
	Errs []error
}

// CPUGroup is one cgroup's CPU bandwidth: its limit and its counters.
type CPUGroup struct {
	Dir   Dir
	V2    bool
	Quota Quota
	Stat  CPUStat
}

// MemGroup is one memory cgroup's counters.
type MemGroup struct {
	Dir Dir
	V2  bool
	Mem MemCounters
}

// Pressures is the PSI of the three resources.
type Pressures struct {
	CPU, Memory, IO PSI
}

// ThreadCounters is what the kernel counts per thread that says it waited
// for memory or for a CPU.
type ThreadCounters struct {
	TID                      int
	MajorFaults, MinorFaults uint64
	// Voluntary and Involuntary are context switches: the thread gave
	// up the CPU (it blocked), or was taken off it (preempted while
	// runnable).
	Voluntary, Involuntary uint64
}

// ParseError says which file did not hold what its kernel documentation
// says it holds.
type ParseError struct {
	File string
	Err  error
}

func (e *ParseError) Error() string { return fmt.Sprintf("parsing %s: %v", e.File, e.Err) }
func (e *ParseError) Unwrap() error { return e.Err }

// NotMountedError says that no mount here shows the process's cgroup of
// a controller: the hierarchy is not mounted in stallwatch's mount
// namespace, or the mount shows a subtree the cgroup is outside of.
type NotMountedError struct {
	Controller, Path string
}

func (e *NotMountedError) Error() string {
	return fmt.Sprintf("the %s cgroup %s: no cgroup mount here shows it (mount the %s hierarchy to read it)", e.Controller, e.Path, e.Controller)
}

// Reader reads the kernel context of one process. The cgroup mounts are
// read once; the process's cgroups at every reading (it may be moved).
type Reader struct {
	pid    int
	mounts []Mount
	// mountErr is why no cgroup mount is known.
	mountErr error
}

// Files are where a Reader reads; tests point them elsewhere.
var (
	mountinfoPath = "/proc/self/mountinfo"
	pressureDir   = "/proc/pressure"
)

// NewReader prepares to read pid's kernel context.
func NewReader(pid int) *Reader {
	r := &Reader{pid: pid}
	b, err := procfs.ReadLimited(mountinfoPath, 16<<20)
	if err != nil {
		r.mountErr = err
		return r
	}
	r.mounts = ParseMountinfo(b)
	if len(r.mounts) == 0 {
		r.mountErr = errors.New("no cgroup file system is mounted here")
	}
	return r
}

// Read takes a reading; threads adds every thread's counters (a few
// microseconds per thread). It fails only when the process is gone;
// what else could not be read is in Reading.Errs.
func (r *Reader) Read(threads bool) (*Reading, error) {
	rd := &Reading{PID: r.pid, Mono: monotime.Now(), Time: time.Now()}
	b, err := procfs.ReadLimited(procfs.PidPath(r.pid, "cgroup"), 1<<20)
	if err != nil {
		if errors.Is(err, procfs.ErrGone) {
			return nil, err
		}
		rd.fail(err)
	} else if rd.Cgroups, err = ParseProcCgroup(b); err != nil {
		rd.failParse(procfs.PidPath(r.pid, "cgroup"), err)
	}
	r.readCgroups(rd)
	rd.Host = readPressures(rd, pressureDir, "")
	r.readHost(rd)
	if threads {
		if err := readThreads(rd); err != nil {
			return nil, err
		}
	}
	return rd, nil
}

// fail records a read error (which names its file).
func (rd *Reading) fail(err error) { rd.Errs = append(rd.Errs, err) }

// failParse records that file did not parse.
func (rd *Reading) failParse(file string, err error) {
	rd.Errs = append(rd.Errs, &ParseError{File: file, Err: err})
}

// readCgroups reads the cpu and memory cgroups, v1 where the controller
// is bound to a v1 hierarchy, else v2, and the v2 cgroup's pressure.
func (r *Reader) readCgroups(rd *Reading) {
	if len(rd.Cgroups) == 0 {
		return
	}
	if r.mountErr != nil {
		rd.fail(r.mountErr)
		return
	}
	for _, m := range rd.Cgroups {
		if !m.V2() {
			continue
		}
		d, ok := Locate(m, r.mounts)
		if !ok {
			continue
		}
		if !v1Has(rd.Cgroups, "cpu") {
			rd.CPU = readCPUGroups(rd, d, true)
		}
		if !v1Has(rd.Cgroups, "memory") {
			rd.Memory = readMemGroups(rd, d, true)
		}
		if d.Path != "/" {
			rd.Cgroup = readPressures(rd, d.FS, ".pressure")
			rd.CgroupPath = d.Path
		}
	}
	for _, ctrl := range []string{"cpu", "memory"} {
		m, ok := v1Membership(rd.Cgroups, ctrl)
		if !ok {
			continue
		}
		d, ok := Locate(m, r.mounts)
		if !ok {
			rd.fail(&NotMountedError{Controller: ctrl, Path: m.Path})
			continue
		}
		if ctrl == "cpu" {
			rd.CPU = readCPUGroups(rd, d, false)
		} else {
			rd.Memory = readMemGroups(rd, d, false)
		}
	}
}

func v1Membership(ms []Membership, ctrl string) (Membership, bool) {
	for _, m := range ms {
		if !m.V2() && m.Has(ctrl) {
			return m, true
		}
	}
	return Membership{}, false
}

func v1Has(ms []Membership, ctrl string) bool {
	_, ok := v1Membership(ms, ctrl)
	return ok
}

// maxDepth bounds how many cgroups above the process are read.
const maxDepth = 64

// readCPUGroups reads the bandwidth of d and every cgroup above it.
func readCPUGroups(rd *Reading, d Dir, v2 bool) []CPUGroup {
	var out []CPUGroup
	for i := 0; i < maxDepth; i++ {
		g := CPUGroup{Dir: d, V2: v2}
		if readCPUGroup(rd, &g) {
			out = append(out, g)
		}
		var ok bool
		if d, ok = d.Parent(); !ok {
			break
		}
	}
	return out
}

// readCPUGroup fills g; false when the cgroup has no bandwidth files
// (the root cgroup, or v2 without the cpu controller).
func readCPUGroup(rd *Reading, g *CPUGroup) bool {
	stat, err := readFile(path.Join(g.Dir.FS, "cpu.stat"))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			rd.fail(err)
		}
		return false
	}
	g.Stat = ParseCPUStat(stat)
	if g.V2 {
		b, err := readFile(path.Join(g.Dir.FS, "cpu.max"))
		if err != nil {
			// The root and cgroups without the controller: usage only.
			return g.Stat.Bandwidth
		}
		if g.Quota, err = ParseCPUMax(b); err != nil {
			rd.failParse(path.Join(g.Dir.FS, "cpu.max"), err)
		}
		return true
	}
	quota, err1 := readFile(path.Join(g.Dir.FS, "cpu.cfs_quota_us"))
	period, err2 := readFile(path.Join(g.Dir.FS, "cpu.cfs_period_us"))
	if err := errors.Join(err1, err2); err != nil {
		rd.fail(err)
		return true
	}
	if g.Quota, err1 = ParseCFSQuota(quota, period); err1 != nil {
		rd.failParse(g.Dir.FS, err1)
	}
	return true
}

// readMemGroups reads d and every memory cgroup above it.
func readMemGroups(rd *Reading, d Dir, v2 bool) []MemGroup {
	var out []MemGroup
	for i := 0; i < maxDepth; i++ {
		g := MemGroup{Dir: d, V2: v2}
		if readMemGroup(rd, &g) {
			out = append(out, g)
		}
		var ok bool
		if d, ok = d.Parent(); !ok {
			break
		}
	}
	return out
}

// readMemGroup fills g; false when the cgroup has no memory files (v2's
// root, or the memory controller not enabled for it).
func readMemGroup(rd *Reading, g *MemGroup) bool {
	c := &g.Mem
	names := [...]string{"memory.limit_in_bytes", "memory.usage_in_bytes", "memory.oom_control", "memory.stat", "memory.failcnt"}
	if g.V2 {
		names = [...]string{"memory.max", "memory.current", "memory.events", "memory.stat", "memory.high"}
	}
	var files [len(names)][]byte
	for i, n := range names {
		b, err := readFile(path.Join(g.Dir.FS, n))
		if err != nil {
			if i == 0 && errors.Is(err, fs.ErrNotExist) {
				return false
			}
			rd.fail(err)
			continue
		}
		files[i] = b
	}
	var err error
	if g.V2 {
		c.Limit, c.Limited, err = ParseV2Limit(files[0])
		noteParse(rd, g.Dir.FS, names[0], files[0], err)
		c.High, c.HighSet, err = ParseV2Limit(files[4])
		noteParse(rd, g.Dir.FS, names[4], files[4], err)
		ParseMemoryEvents(files[2], c)
	} else {
		c.Limit, c.Limited, err = ParseV1Limit(files[0])
		noteParse(rd, g.Dir.FS, names[0], files[0], err)
		c.Failcnt, err = parseNumber(files[4])
		noteParse(rd, g.Dir.FS, names[4], files[4], err)
		ParseOOMControl(files[2], c)
	}
	c.Usage, err = parseNumber(files[1])
	noteParse(rd, g.Dir.FS, names[1], files[1], err)
	ParseMemoryStat(files[3], c)
	return true
}

// noteParse records a parse error of a file that was read.
func noteParse(rd *Reading, dir, name string, b []byte, err error) {
	if err != nil && b != nil {
		rd.failParse(path.Join(dir, name), err)
	}
}

// readPressures reads the three PSI files in dir (named cpu, memory, io,
// each with suffix); nil when none is there.
func readPressures(rd *Reading, dir, suffix string) *Pressures {
	var p Pressures
	found := false
	for _, f := range []struct {
		name string
		dst  *PSI
	}{{"cpu", &p.CPU}, {"memory", &p.Memory}, {"io", &p.IO}} {
		file := path.Join(dir, f.name+suffix)
		b, err := readFile(file)
		if err != nil {
			// No PSI in this kernel, or psi=0 (EOPNOTSUPP): nothing to say
			// per file; the reading simply has none.
			if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EOPNOTSUPP) {
				rd.fail(err)
			}
			continue
		}
		if *f.dst, err = ParsePressure(b); err != nil {
			rd.failParse(file, err)
			continue
		}
		found = true
	}
	if !found {
		return nil
	}
	return &p
}

// ReadProcStat reads the host's CPU times from /proc/stat.
func ReadProcStat() (CPUTimes, error) {
	stat := path.Join(procfs.Root, "stat")
	b, err := readFile(stat)
	if err != nil {
		return CPUTimes{}, err
	}
	c, err := ParseProcStat(b)
	if err != nil {
		return CPUTimes{}, &ParseError{File: stat, Err: err}
	}
	return c, nil
}

// readHost reads /proc/stat, /proc/vmstat and /proc/diskstats.
func (r *Reader) readHost(rd *Reading) {
	if c, err := ReadProcStat(); err != nil {
		rd.fail(err)
	} else {
		rd.CPUTimes = c
	}
	if b, err := readFile(path.Join(procfs.Root, "vmstat")); err != nil {
		rd.fail(err)
	} else {
		rd.VM = ParseVMStat(b)
	}
	if b, err := procfs.ReadLimited(path.Join(procfs.Root, "diskstats"), 16<<20); err == nil {
		rd.Disks = ParseDiskstats(b)
	} else if !errors.Is(err, fs.ErrNotExist) {
		rd.fail(err)
	}
}

// readThreads reads every thread's faults (stat) and switches (status)
// into one reused buffer. A thread that exits meanwhile is left out; the
// process gone is an error.
func readThreads(rd *Reading) error {
	tids, err := procfs.Threads(rd.PID)
	if err != nil {
		return err
	}
	rd.Threads = make([]ThreadCounters, 0, len(tids))
	buf := make([]byte, 0, 16<<10)
	bad := 0
	for _, tid := range tids {
		c := ThreadCounters{TID: tid}
		b, err := procfs.ReadInto(procfs.TaskPath(rd.PID, tid, "stat"), buf)
		if err != nil {
			continue
		}
		var ok1, ok2 bool
		c.MinorFaults, c.MajorFaults, ok1 = parseStatFaults(b)
		if b, err = procfs.ReadInto(procfs.TaskPath(rd.PID, tid, "status"), buf); err != nil {
			continue
		}
		c.Voluntary, c.Involuntary, ok2 = parseSwitches(b)
		if !ok1 || !ok2 {
			bad++
			continue
		}
		rd.Threads = append(rd.Threads, c)
	}
	if bad > 0 {
		rd.failParse(procfs.TaskPath(rd.PID, 0, "{stat,status}"), fmt.Errorf("%d threads' files lack their fault or switch counts", bad))
	}
	return nil
}

// parseStatFaults reads minflt and majflt (fields 10 and 12) of a stat
// line; the fields are counted from the last ')' (a thread's name may
// hold spaces and parentheses).
func parseStatFaults(b []byte) (minflt, majflt uint64, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := 2 // the field the ')' ends
	var vals [2]uint64
	got := 0
	for j := i + 1; j < len(b) && got < 2; {
		for j < len(b) && b[j] == ' ' {
			j++
		}
		k := j
		for k < len(b) && b[k] != ' ' && b[k] != '\n' {
			k++
		}
		if k == j {
			break
		}
		f++
		if f == 10 || f == 12 {
			v, err := strconv.ParseUint(string(b[j:k]), 10, 64)
			if err != nil {
				return 0, 0, false
			}
			vals[got] = v
			got++
		}
		j = k
	}
	return vals[0], vals[1], got == 2
}

// parseSwitches reads voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches, the last lines of a status file.
func parseSwitches(b []byte) (vol, invol uint64, ok bool) {
	v, ok1 := statusValue(b, "\nvoluntary_ctxt_switches:")
	n, ok2 := statusValue(b, "\nnonvoluntary_ctxt_switches:")
	return v, n, ok1 && ok2
}

func statusValue(b []byte, key string) (uint64, bool) {
	i := bytes.LastIndex(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := b[i+len(key):]
	line, _, _ := bytes.Cut(rest, []byte{'\n'})
	v, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 10, 64)
	return v, err == nil
}

// readFile reads a small kernel file (cgroup, PSI, /proc/stat).
func readFile(name string) ([]byte, error) {
	return procfs.ReadLimited(name, 1<<20)
}
