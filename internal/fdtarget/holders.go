package fdtarget

import (
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/procwatch"
	"golang.org/x/sys/unix"
)

// Holder is a process holding a descriptor of a file: the other end of a
// pipe, the peer of a socket.
type Holder struct {
	PID  int
	Name string // its main thread's name (comm), as the process set it
	FD   int
	// Access is how the descriptor was opened: "read", "write" or
	// "read-write" (fdinfo flags).
	Access string
	// State is the process's: "running" (a thread on a CPU or runnable),
	// "sleeping", "in uninterruptible sleep", "stopped" (SIGSTOP, a job
	// stop), "traced" (stopped by a debugger), "exited" (a zombie, or
	// gone since it was found).
	State string
	// Self is the process whose descriptor is being resolved.
	Self bool
	// TID and Syscall are, when known, a thread of the holder blocked in
	// a system call on this very descriptor ("read", "sendmsg").
	TID     int
	Syscall string
}

// scan looks for the processes holding files named by their link text
// ("pipe:[123]", "socket:[456]"), within a budget of descriptors looked
// at; what it finds stays in found.
type scan struct {
	self   int // the process resolved: its holders are Self
	own    int // stallwatch: never a holder worth naming
	want   map[string]bool
	found  map[string][]Holder
	budget int
	// scanned counts descriptors looked at, procs processes; cut says
	// the budget ran out before every process was looked at.
	scanned, procs int
	cut            bool
	buf            []byte
}

func newScan(self, budget int, links []string) *scan {
	s := &scan{self: self, own: os.Getpid(), want: map[string]bool{}, found: map[string][]Holder{}, budget: budget, buf: make([]byte, 256)}
	for _, l := range links {
		s.want[l] = true
	}
	return s
}

// run looks at every process's descriptors, the resolved process's last
// when it has more than half the budget (its own descriptors hold the
// other end of its pipes less often than others do, and a process with
// 100,000 descriptors must not use the budget up before anyone else is
// looked at), first otherwise.
func (s *scan) run() {
	if len(s.want) == 0 {
		return
	}
	pids, err := procwatch.List()
	if err != nil {
		s.cut = true
		return
	}
	sort.Ints(pids)
	selfLast := fdCount(s.self) > s.budget/2
	if !selfLast {
		s.process(s.self)
	}
	for _, pid := range pids {
		if pid == s.self || pid == s.own {
			continue
		}
		if s.budget <= 0 {
			s.cut = true
			return
		}
		s.process(pid)
	}
	if selfLast {
		s.process(s.self)
	}
}

// process looks at one process's descriptors.
func (s *scan) process(pid int) {
	d, err := os.Open(procfs.PidPath(pid, "fd"))
	if err != nil {
		return // gone, a kernel thread, or not ours to read
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	dfd := int(d.Fd())
	s.procs++
	for _, n := range names {
		if s.budget <= 0 {
			s.cut = true
			return
		}
		s.budget--
		s.scanned++
		k, err := unix.Readlinkat(dfd, n, s.buf)
		if err != nil || k == len(s.buf) {
			continue
		}
		link := string(s.buf[:k])
		if !s.want[link] {
			continue
		}
		fd, _ := strconv.Atoi(n)
		s.found[link] = append(s.found[link], Holder{PID: pid, FD: fd, Self: pid == s.self})
	}
}

// fdCount is how many descriptors pid has open: the size /proc/<pid>/fd
// reports (proc.rst 3.13), without listing them.
func fdCount(pid int) int {
	var st unix.Stat_t
	if err := unix.Stat(procfs.PidPath(pid, "fd"), &st); err != nil {
		return 0
	}
	return int(st.Size)
}

// procInfo is what is known of a holding process: its name, its state,
// and which of its threads are blocked in a system call on which of its
// descriptors.
type procInfo struct {
	name, state string
	blocked     map[int]blockedOn // by descriptor
}

type blockedOn struct {
	tid     int
	syscall string
}

// describeHolder fills what is known of a holder: the access of its
// descriptor and, for another process, its name and state and a thread
// of it blocked on the descriptor. What is read of a process is read once
// for all its holders (procs).
func describeHolder(h *Holder, sys SyscallNamer, procs map[int]*procInfo) {
	if b, err := procfs.ReadLimited(procfs.PidPath(h.PID, "fdinfo", strconv.Itoa(h.FD)), 64<<10); err == nil {
		h.Access = accessOf(ParseFdinfo(b).Flags)
	}
	if h.Self {
		return // the snapshot tells its own threads' states
	}
	p, ok := procs[h.PID]
	if !ok {
		p = readProcInfo(h.PID, sys)
		procs[h.PID] = p
	}
	h.Name, h.State = p.name, p.state
	if b, ok := p.blocked[h.FD]; ok {
		h.TID, h.Syscall = b.tid, b.syscall
	}
}

// accessOf names the O_ACCMODE of open flags.
func accessOf(flags int) string {
	switch flags & unix.O_ACCMODE {
	case unix.O_RDONLY:
		return "read"
	case unix.O_WRONLY:
		return "write"
	}
	return "read-write"
}

// maxHolderThreads bounds the threads of a holder looked at.
const maxHolderThreads = 64

// readProcInfo says what a process is doing, from its threads' states
// (the first maxHolderThreads of them), and which of them are blocked in
// a system call on one of its descriptors (when sys names system calls).
func readProcInfo(pid int, sys SyscallNamer) *procInfo {
	p := &procInfo{state: "exited", blocked: map[int]blockedOn{}}
	p.name, _ = procfs.Comm(pid, pid)
	st, err := procfs.ReadStat(pid, pid)
	if err != nil {
		return p
	}
	switch st.State {
	case 'T':
		p.state = "stopped"
		return p
	case 't':
		p.state = "traced"
		return p
	}
	// A zombie main thread may lead live threads (pthread_exit in
	// main): they say what the process does.
	tids, err := procfs.Threads(pid)
	if err != nil {
		return p
	}
	running, uninterruptible, live := false, false, false
	for i, t := range tids {
		if i >= maxHolderThreads {
			break
		}
		ts, err := procfs.ReadStat(pid, t)
		if err != nil {
			continue
		}
		switch ts.State {
		case 'R':
			running = true
		case 'D':
			uninterruptible = true
		}
		if ts.State == 'Z' || ts.State == 'X' {
			continue
		}
		live = true
		if sys == nil || ts.State == 'R' {
			continue
		}
		if sc, err := procfs.ReadSyscall(pid, t); err == nil && !sc.Running && sc.Nr >= 0 {
			if name, ok := sys(sc.Nr); ok {
				fd := int(int32(sc.Args[0]))
				if _, seen := p.blocked[fd]; !seen {
					p.blocked[fd] = blockedOn{t, name}
				}
			}
		}
	}
	switch {
	case !live:
		p.state = "exited"
	case running:
		p.state = "running"
	case uninterruptible:
		p.state = "in uninterruptible sleep"
	default:
		p.state = "sleeping"
	}
	return p
}

// SyscallNamer names system call nr when its first argument is a file
// descriptor it blocks on; false otherwise.
type SyscallNamer func(nr int) (name string, fdArg bool)

// linkInode reads "kind:[N]".
func linkInode(link, kind string) (uint64, bool) {
	rest, ok := strings.CutPrefix(link, kind+":[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return 0, false
	}
	n, err := strconv.ParseUint(rest[:len(rest)-1], 10, 64)
	return n, err == nil
}
