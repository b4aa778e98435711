package procfs

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Status holds the fields of /proc/<pid>/task/<tid>/status that stallwatch uses.
type Status struct {
	Name      string
	State     byte // 'R', 'S', 'D', 'T', 't', 'Z', 'X', 'I'
	Tgid      int
	Pid       int
	PPid      int
	TracerPid int
	// NSpid lists the id in each pid namespace, outermost first; the last
	// is the id the target sees for itself (and writes into jitdump and
	// perf-map file names).
	NSpid []int
	// Uid and Gid: real, effective, saved, filesystem.
	Uid, Gid [4]uint32
	// SigIgn and SigCgt are the signals the process ignores and those it
	// has handlers for (bit n-1 for signal n): whether a signal sent to
	// it would be handled, ignored or take its default action.
	SigIgn, SigCgt uint64
	// The thread's capability sets, one bit per capability
	// (linux/capability.h): inheritable, permitted, effective, bounding,
	// ambient.
	CapInh, CapPrm, CapEff, CapBnd, CapAmb CapSet
	// Seccomp is the seccomp mode: 0 none, 1 strict, 2 a filter.
	Seccomp int

	VoluntaryCtxtSwitches    uint64
	NonvoluntaryCtxtSwitches uint64
}

// InnerPid is the pid in the target's own namespace.
func (s Status) InnerPid() int {
	if len(s.NSpid) == 0 {
		return s.Pid
	}
	return s.NSpid[len(s.NSpid)-1]
}

// ReadStatus reads /proc/<pid>/task/<tid>/status (pass tid == pid for the
// process's main thread).
func ReadStatus(pid, tid int) (Status, error) {
	b, err := readTask(pid, tid, "status")
	if err != nil {
		return Status{}, err
	}
	return ParseStatus(b)
}

// ParseStatus parses the text of a status file. A snapshot parses one
// per thread (thousands), so it walks the text in place: no line is
// split off or copied but the values kept.
func ParseStatus(b []byte) (Status, error) {
	var s Status
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		c := bytes.IndexByte(line, ':')
		if c < 0 {
			continue
		}
		k, val := line[:c], bytes.TrimSpace(line[c+1:])
		switch string(k) {
		case "Name":
			s.Name = string(val)
		case "State":
			if len(val) > 0 {
				s.State = val[0]
			}
		case "Tgid":
			s.Tgid, _ = strconv.Atoi(string(val))
		case "Pid":
			s.Pid, _ = strconv.Atoi(string(val))
		case "PPid":
			s.PPid, _ = strconv.Atoi(string(val))
		case "TracerPid":
			s.TracerPid, _ = strconv.Atoi(string(val))
		case "NSpid":
			for _, f := range bytes.Fields(val) {
				if n, err := strconv.Atoi(string(f)); err == nil {
					s.NSpid = append(s.NSpid, n)
				}
			}
		case "Uid":
			s.Uid = parseIDs(val)
		case "Gid":
			s.Gid = parseIDs(val)
		case "SigIgn":
			s.SigIgn, _ = strconv.ParseUint(string(val), 16, 64)
		case "SigCgt":
			s.SigCgt, _ = strconv.ParseUint(string(val), 16, 64)
		case "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb":
			*s.capSet(string(k)) = parseCapSet(val)
		case "Seccomp":
			s.Seccomp, _ = strconv.Atoi(string(val))
		case "voluntary_ctxt_switches":
			s.VoluntaryCtxtSwitches, _ = strconv.ParseUint(string(val), 10, 64)
		case "nonvoluntary_ctxt_switches":
			s.NonvoluntaryCtxtSwitches, _ = strconv.ParseUint(string(val), 10, 64)
		}
	}
	if s.Pid == 0 {
		return s, fmt.Errorf("status: no Pid field")
	}
	return s, nil
}

// CapSet is a set of capabilities, bit c for capability number c.
type CapSet uint64

// Has reports whether capability number c is in the set.
func (s CapSet) Has(c int) bool { return c >= 0 && c < 64 && s&(1<<c) != 0 }

func (s *Status) capSet(name string) *CapSet {
	switch name {
	case "CapInh":
		return &s.CapInh
	case "CapPrm":
		return &s.CapPrm
	case "CapEff":
		return &s.CapEff
	case "CapBnd":
		return &s.CapBnd
	}
	return &s.CapAmb
}

// parseCapSet reads a capability mask, 16 hexadecimal digits; a
// malformed one is the empty set.
func parseCapSet(val []byte) CapSet {
	n, err := strconv.ParseUint(string(val), 16, 64)
	if err != nil {
		return 0
	}
	return CapSet(n)
}

func parseIDs(val []byte) [4]uint32 {
	var ids [4]uint32
	for i, f := range bytes.Fields(val) {
		if i >= 4 {
			break
		}
		n, _ := strconv.ParseUint(string(f), 10, 32)
		ids[i] = uint32(n)
	}
	return ids
}

// Stat holds the fields of /proc/<pid>/task/<tid>/stat that stallwatch uses.
type Stat struct {
	Comm  string
	State byte
	// Utime and Stime are in clock ticks (USER_HZ, 100 on Linux).
	Utime, Stime uint64
	// StartTime is in clock ticks since boot.
	StartTime uint64
	// Processor is the CPU the thread last ran on.
	Processor int
	// Flags are the kernel's PF_* flags of the task.
	Flags uint64
	// MinorFaults and MajorFaults count the thread's page faults that
	// found the page in memory and that had to read it (from a file or
	// swap).
	MinorFaults, MajorFaults uint64
}

// pfKthread is PF_KTHREAD (include/linux/sched.h).
const pfKthread = 0x00200000

// KernelThread reports whether the task is a kernel thread: it has no
// user space (no maps, no user stack, nothing ptrace can stop).
func (s Stat) KernelThread() bool { return s.Flags&pfKthread != 0 }

// ClockTicks is USER_HZ, the unit of Stat times. Linux fixes it at 100 for
// every architecture stallwatch supports.
const ClockTicks = 100

// ReadStat reads /proc/<pid>/task/<tid>/stat.
func ReadStat(pid, tid int) (Stat, error) {
	b, err := readTask(pid, tid, "stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// ParseStat parses a stat line. The comm field is in parentheses and may
// itself hold spaces and parentheses, so the fields after it are found from
// the last ')'.
func ParseStat(b []byte) (Stat, error) {
	var st Stat
	open := bytes.IndexByte(b, '(')
	close := bytes.LastIndexByte(b, ')')
	if open < 0 || close < open {
		return st, fmt.Errorf("stat: no comm field")
	}
	st.Comm = string(b[open+1 : close])
	f := strings.Fields(string(b[close+1:]))
	// f[0] is field 3 (state); field n is f[n-3].
	if len(f) < 37 {
		return st, fmt.Errorf("stat: %d fields after comm, want at least 37", len(f))
	}
	st.State = f[0][0]
	st.Flags, _ = strconv.ParseUint(f[9-3], 10, 64)
	st.MinorFaults, _ = strconv.ParseUint(f[10-3], 10, 64)
	st.MajorFaults, _ = strconv.ParseUint(f[12-3], 10, 64)
	st.Utime, _ = strconv.ParseUint(f[14-3], 10, 64)
	st.Stime, _ = strconv.ParseUint(f[15-3], 10, 64)
	st.StartTime, _ = strconv.ParseUint(f[22-3], 10, 64)
	st.Processor, _ = strconv.Atoi(f[39-3])
	return st, nil
}

// Schedstat is /proc/<pid>/task/<tid>/schedstat: nanoseconds on CPU,
// nanoseconds runnable but waiting on a run queue, and timeslices run.
type Schedstat struct {
	RunNanos, WaitNanos, Slices uint64
}

// ReadSchedstat reads the thread's schedstat. Kernels built without
// CONFIG_SCHED_INFO lack the file: the error then wraps fs.ErrNotExist.
func ReadSchedstat(pid, tid int) (Schedstat, error) {
	b, err := readTask(pid, tid, "schedstat")
	if err != nil {
		return Schedstat{}, err
	}
	return ParseSchedstat(b)
}

// ParseSchedstat parses the text of a schedstat file.
func ParseSchedstat(b []byte) (Schedstat, error) {
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return Schedstat{}, fmt.Errorf("schedstat: %d fields, want 3", len(f))
	}
	var s Schedstat
	s.RunNanos, _ = strconv.ParseUint(f[0], 10, 64)
	s.WaitNanos, _ = strconv.ParseUint(f[1], 10, 64)
	s.Slices, _ = strconv.ParseUint(f[2], 10, 64)
	return s, nil
}

// Wchan returns the kernel function the thread sleeps in, or "" if it runs.
func Wchan(pid, tid int) (string, error) {
	b, err := readTask(pid, tid, "wchan")
	if err != nil {
		return "", err
	}
	return ParseWchan(b), nil
}

// ParseWchan parses the text of a wchan file.
func ParseWchan(b []byte) string {
	s := strings.TrimSpace(string(b))
	if s == "0" {
		s = ""
	}
	return s
}
