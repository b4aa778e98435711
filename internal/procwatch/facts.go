package procwatch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// ID names a process across pid reuse: its pid and its start time in clock
// ticks since boot.
type ID struct {
	PID   int
	Start uint64
}

func (id ID) String() string { return strconv.Itoa(id.PID) }

// Facts are what rules select a process by.
type Facts struct {
	ID
	Comm    string
	Cmdline []string // nil for a kernel thread or a zombie
	// Exe is the executable's path in the process's mount namespace; ""
	// when it cannot be read (another user's process without
	// CAP_SYS_PTRACE, a kernel thread).
	Exe string
	// UID is the effective user id.
	UID int
	// Cgroup is the process's cgroup path: the unified hierarchy's (v2),
	// else the first v1 hierarchy's.
	Cgroup string
	// ContainerID is the container's id found in the cgroup path (64 hex
	// digits as docker, containerd and CRI-O name them), or "".
	ContainerID string
	// PodUID is the Kubernetes pod's UID found in the cgroup path, with
	// dashes, or "".
	PodUID string
}

// CommandLine is the command line as one string, arguments joined by
// spaces: what a cmdline pattern is matched against.
func (f *Facts) CommandLine() string { return strings.Join(f.Cmdline, " ") }

// Read reads the facts of process pid. A process that is gone or a zombie
// is procfs.ErrGone.
func Read(pid int) (Facts, error) { return ReadCmdline(pid, 0) }

// ReadCmdline is Read with at most cmdline bytes of the command line
// (0: all of it, up to 1 MiB): what selecting by it needs, when every
// exec of the host is looked at.
func ReadCmdline(pid, cmdline int) (Facts, error) {
	f := Facts{ID: ID{PID: pid}}
	st, err := procfs.ReadStat(pid, pid)
	if err != nil {
		return f, err
	}
	if st.State == 'Z' || st.State == 'X' {
		return f, fmt.Errorf("process %d: %w (a zombie)", pid, procfs.ErrGone)
	}
	f.Start, f.Comm = st.StartTime, st.Comm
	status, err := procfs.ReadStatus(pid, pid)
	if err != nil {
		return f, err
	}
	f.UID = int(status.Uid[1])
	if cmdline > 0 {
		f.Cmdline, err = procfs.CmdlinePrefix(pid, cmdline)
	} else {
		f.Cmdline, err = procfs.Cmdline(pid)
	}
	if err != nil {
		return f, err
	}
	f.Exe, _ = procfs.Exe(pid) // unreadable: "" (the facts say what could be read)
	if b, err := procfs.ReadLimited(procfs.PidPath(pid, "cgroup"), 64<<10); err == nil {
		f.Cgroup = ParseCgroup(b)
		f.ContainerID, f.PodUID = ContainerOf(f.Cgroup)
	} else if errors.Is(err, procfs.ErrGone) {
		return f, err
	}
	// The start time read again: the pid was not reused while we read.
	if st2, err := procfs.ReadStat(pid, pid); err != nil || st2.StartTime != f.Start {
		return f, fmt.Errorf("process %d: %w (its pid was reused while it was read)", pid, procfs.ErrGone)
	}
	return f, nil
}

// StartOf returns process pid's ID as of now.
func StartOf(pid int) (ID, error) {
	st, err := procfs.ReadStat(pid, pid)
	if err != nil {
		return ID{}, err
	}
	return ID{PID: pid, Start: st.StartTime}, nil
}

// List returns the pids of every process in /proc.
func List() ([]int, error) {
	d, err := os.Open(procfs.Root)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", procfs.Root, err)
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if n == "" || n[0] < '1' || n[0] > '9' {
			continue
		}
		if pid, err := strconv.Atoi(n); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// ParseCgroup returns the cgroup path of a /proc/<pid>/cgroup file: the
// unified hierarchy's ("0::/path"), else the first v1 hierarchy that
// names one (the systemd or memory controller usually), else "".
func ParseCgroup(b []byte) string {
	var first string
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		id, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		ctrl, path, ok := bytes.Cut(rest, []byte{':'})
		if !ok || len(path) == 0 {
			continue
		}
		if string(id) == "0" && len(ctrl) == 0 {
			return string(path)
		}
		if first == "" && string(path) != "/" {
			first = string(path)
		}
	}
	return first
}

var (
	// A container id is 64 hex digits, alone or as docker-ID.scope,
	// cri-containerd-ID.scope, crio-ID.scope, libpod-ID.scope.
	containerRx = regexp.MustCompile(`^(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$`)
	// A pod is "pod<uid>" (cgroupfs driver) or "...-pod<uid_with_underscores>.slice" (systemd driver).
	podRx = regexp.MustCompile(`pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$`)
)

// ContainerOf finds the container id and the Kubernetes pod UID in a
// cgroup path: the last element that is a container id, and the pod
// element above it.
func ContainerOf(cgroup string) (containerID, podUID string) {
	for _, el := range strings.Split(cgroup, "/") {
		if m := containerRx.FindStringSubmatch(el); m != nil {
			containerID = m[1]
		}
		if m := podRx.FindStringSubmatch(el); m != nil {
			podUID = strings.ReplaceAll(m[1], "_", "-")
		}
	}
	return containerID, podUID
}
