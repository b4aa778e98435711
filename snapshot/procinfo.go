package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/model"
)

// x86-64 system call numbers the snapshot interprets.
const (
	sysRead           = 0
	sysWrite          = 1
	sysPoll           = 7
	sysPread64        = 17
	sysPwrite64       = 18
	sysReadv          = 19
	sysWritev         = 20
	sysSelect         = 23
	sysPause          = 34
	sysNanosleep      = 35
	sysSendto         = 44
	sysRecvfrom       = 45
	sysSendmsg        = 46
	sysRecvmsg        = 47
	sysAccept         = 43
	sysConnect        = 42
	sysWait4          = 61
	sysFlock          = 73
	sysFsync          = 74
	sysFdatasync      = 75
	sysFcntl          = 72
	sysIoctl          = 16
	sysRtSigsuspend   = 130
	sysRtSigtimedwait = 128
	sysFutex          = 202
	sysEpollWait      = 232
	sysClockNanosleep = 230
	sysWaitid         = 247
	sysPselect6       = 270
	sysPpoll          = 271
	sysEpollPwait     = 281
	sysAccept4        = 288
	sysRecvmmsg       = 299
	sysSendmmsg       = 307
	sysEpollPwait2    = 441
	sysFutexWaitv     = 449
	sysRestart        = 219
)

// fdSyscalls take a file descriptor as their first argument and block on it.
var fdSyscalls = map[int]bool{
	sysRead: true, sysWrite: true, sysPread64: true, sysPwrite64: true, sysReadv: true,
	sysWritev: true, sysSendto: true, sysRecvfrom: true, sysSendmsg: true, sysRecvmsg: true,
	sysAccept: true, sysAccept4: true, sysConnect: true, sysFlock: true, sysFsync: true,
	sysFdatasync: true, sysFcntl: true, sysIoctl: true, sysEpollWait: true, sysEpollPwait: true,
	sysEpollPwait2: true, sysRecvmmsg: true, sysSendmmsg: true,
}

// readFacts fills what /proc tells about a thread: name, state,
// system call, switches, scheduler times, read through f in this order
// (the status and schedstat before the syscall line: asleep.go). Errors
// of single files are noted in t.Err, files we may not read in denied;
// an error is returned when the thread is gone.
func readFacts(f *taskFiles, t *model.Thread, sc *procfs.Syscall, ss *procfs.Schedstat, denied map[string]bool) (procfs.Status, error) {
	b, err := f.read("status")
	if err != nil {
		return procfs.Status{}, err
	}
	st, err := procfs.ParseStatus(b)
	if err != nil {
		return st, err
	}
	t.Name = st.Name
	t.State = st.State
	if st.TracerPid > 0 && st.TracerPid != os.Getpid() {
		t.TracerPID = st.TracerPid
		t.Tracer, _ = procfs.Comm(st.TracerPid, st.TracerPid)
	}
	t.VoluntarySwitches = st.VoluntaryCtxtSwitches
	t.InvoluntarySwitches = st.NonvoluntaryCtxtSwitches
	note := func(what string, err error) { noteRead(t, denied, what, err) }
	if t.Name == "" {
		t.Name, err = procfs.Comm(f.pid, f.tid)
		note("comm", err)
	}
	if b, err = f.readKept(keptSchedstat); err == nil {
		*ss, err = procfs.ParseSchedstat(b)
	}
	if err == nil {
		t.RunTime = time.Duration(ss.RunNanos)
		t.RunqueueWait = time.Duration(ss.WaitNanos)
	}
	note("schedstat", err)
	if b, err = f.readKept(keptSyscall); err == nil {
		*sc, err = procfs.ParseSyscall(string(b))
	}
	note("syscall", err)
	if err == nil && !sc.Running && !sc.NotInSyscall && sc.Nr >= 0 {
		t.Syscall = &model.Syscall{Nr: sc.Nr, Name: syscallName(sc.Nr), Args: sc.Args}
	}
	return st, nil
}

// noteRead notes in t.Err a failure to read the thread's file what,
// unless it is gone, or one we may not read (denied: said once for the
// snapshot, not once per thread).
func noteRead(t *model.Thread, denied map[string]bool, what string, err error) {
	switch {
	case err == nil || errors.Is(err, procfs.ErrGone):
	case perms.IsPermission(err):
		denied[what] = true
	default:
		t.Err = errors.Join(t.Err, &model.ReadError{File: what, Err: err})
	}
}

// readKernel reads the thread's kernel stack and the function it sleeps
// in (wchan). The kernel finds both alike — the first function of the
// stack that is not the scheduler's (in_sched_functions) — and shows no
// wchan for a thread that runs or is about to, so where the stack can be
// read its first frame is the wchan, without reading that file too.
func readKernel(f *taskFiles, t *model.Thread, denied map[string]bool) ([]procfs.KernelFrame, error) {
	b, err := f.read("stack")
	if err == nil {
		kf := procfs.ParseKernelStack(string(b))
		if len(kf) > 0 && t.State != 'R' {
			t.Wchan = kf[0].Symbol
			if kf[0].Module != "" {
				t.Wchan += " " + kf[0].Module
			}
		}
		return kf, nil
	}
	b, werr := f.read("wchan")
	if werr == nil {
		t.Wchan = procfs.ParseWchan(b)
	}
	noteRead(t, denied, "wchan", werr)
	return nil, err
}

func syscallName(nr int) string {
	if n, ok := syscallNames[nr]; ok {
		return n
	}
	return fmt.Sprintf("syscall_%d", nr)
}

// fdNamer says what descriptor fd of the process refers to.
type fdNamer func(fd int) string

// linkNamer names a descriptor by its /proc/<pid>/fd link alone: what a
// thread's system call says before the snapshot resolves, once for all
// threads, what each descriptor is connected to (resolveFDs).
func linkNamer(pid int) fdNamer {
	return func(fd int) string { return fdTarget(pid, fd) }
}

// describe writes the readable form of a system call, and the wait it
// means when it is one that blocks on something other than a futex
// (futexes are the lock analysis's), naming descriptors with name; it
// returns the descriptors it named. A Wait's Desc reads after "waits
// for": "a timeout: nanosleep(1s)", "read() on fd 5 → pipe:[12]".
func describe(s *model.Syscall, mem unwind.Memory, name fdNamer) (*model.Wait, []int) {
	a := s.Args
	switch {
	case s.Nr == sysFutex:
		s.Desc = fmt.Sprintf("futex(%#x %s)", a[0], futexOpName(a[1]))
		return nil, nil
	case fdSyscalls[s.Nr]:
		fd := int(int32(a[0]))
		target := "invalid fd"
		if fd >= 0 {
			target = name(fd)
		}
		s.Desc = fmt.Sprintf("%s(fd %d → %s)", s.Name, fd, target)
		kind := "fd"
		if s.Nr == sysEpollWait || s.Nr == sysEpollPwait || s.Nr == sysEpollPwait2 {
			kind = "poll"
		}
		return &model.Wait{Kind: kind, Desc: fmt.Sprintf("%s() on fd %d → %s", s.Name, fd, target)}, []int{fd}
	case s.Nr == sysPoll || s.Nr == sysPpoll:
		desc, fds := pollFDs(mem, a[0], a[1], name)
		s.Desc = fmt.Sprintf("%s(%s)", s.Name, desc)
		return &model.Wait{Kind: "poll", Desc: s.Desc}, fds
	case s.Nr == sysSelect || s.Nr == sysPselect6:
		s.Desc = fmt.Sprintf("%s(nfds %d)", s.Name, int(int32(a[0])))
		return &model.Wait{Kind: "poll", Desc: s.Desc}, nil
	case s.Nr == sysNanosleep:
		s.Desc = fmt.Sprintf("nanosleep(%s)", timespecAt(mem, a[0]))
		return &model.Wait{Kind: "sleep", Desc: "a timeout: " + s.Desc}, nil
	case s.Nr == sysClockNanosleep:
		abs := ""
		if a[1]&1 != 0 {
			abs = "until "
		}
		s.Desc = fmt.Sprintf("clock_nanosleep(%s%s)", abs, timespecAt(mem, a[2]))
		return &model.Wait{Kind: "sleep", Desc: "a timeout: " + s.Desc}, nil
	case s.Nr == sysRestart:
		s.Desc = "restart_syscall() (a sleep or wait resumed after a stop)"
		return &model.Wait{Kind: "sleep", Desc: "a timeout: " + s.Desc}, nil
	case s.Nr == sysWait4:
		s.Desc = fmt.Sprintf("wait4(pid %d)", int(int32(a[0])))
		return &model.Wait{Kind: "child", Desc: "a child process: " + s.Desc}, nil
	case s.Nr == sysWaitid:
		s.Desc = fmt.Sprintf("waitid(type %d, id %d)", a[0], int(int32(a[1])))
		return &model.Wait{Kind: "child", Desc: "a child process: " + s.Desc}, nil
	case s.Nr == sysPause || s.Nr == sysRtSigsuspend || s.Nr == sysRtSigtimedwait:
		s.Desc = s.Name + "()"
		return &model.Wait{Kind: "signal", Desc: "a signal: " + s.Desc}, nil
	case s.Nr == sysFutexWaitv:
		s.Desc = fmt.Sprintf("futex_waitv(%d futexes)", a[1])
		return nil, nil
	}
	s.Desc = fmt.Sprintf("%s(%#x, %#x, %#x)", s.Name, a[0], a[1], a[2])
	return &model.Wait{Kind: "syscall", Desc: s.Desc + " to return"}, nil
}

func fdTarget(pid, fd int) string {
	if fd < 0 {
		return "invalid fd"
	}
	target, err := procfs.FdTarget(pid, fd)
	if err != nil {
		return "unknown (" + shortErr(err) + ")"
	}
	return target
}

// pollFDs lists the descriptors of a poll set, the first few of them,
// and returns those it named.
func pollFDs(mem unwind.Memory, addr, n uint64, name fdNamer) (string, []int) {
	const show = 8
	if n == 0 {
		return "no fds", nil
	}
	k := min(n, show)
	b := make([]byte, 8*k)
	if _, err := mem.ReadAt(b, addr); err != nil {
		return fmt.Sprintf("%d fds", n), nil
	}
	var parts []string
	var fds []int
	for i := uint64(0); i < k; i++ {
		fd := int(int32(binary.LittleEndian.Uint32(b[8*i:])))
		if fd < 0 {
			parts = append(parts, fmt.Sprintf("fd %d (ignored)", fd))
			continue
		}
		parts = append(parts, fmt.Sprintf("fd %d → %s", fd, name(fd)))
		fds = append(fds, fd)
	}
	if n > show {
		parts = append(parts, fmt.Sprintf("and %d more", n-show))
	}
	return strings.Join(parts, ", "), fds
}

func timespecAt(mem unwind.Memory, addr uint64) string {
	var b [16]byte
	if addr == 0 {
		return "no time"
	}
	if _, err := mem.ReadAt(b[:], addr); err != nil {
		return fmt.Sprintf("%#x", addr)
	}
	sec := int64(binary.LittleEndian.Uint64(b[:]))
	nsec := int64(binary.LittleEndian.Uint64(b[8:]))
	if sec < 0 || nsec < 0 || nsec >= 1e9 || sec > 1<<40 {
		return fmt.Sprintf("%#x", addr)
	}
	return (time.Duration(sec)*time.Second + time.Duration(nsec)).String()
}

var futexOps = [...]string{"FUTEX_WAIT", "FUTEX_WAKE", "FUTEX_FD", "FUTEX_REQUEUE", "FUTEX_CMP_REQUEUE",
	"FUTEX_WAKE_OP", "FUTEX_LOCK_PI", "FUTEX_UNLOCK_PI", "FUTEX_TRYLOCK_PI", "FUTEX_WAIT_BITSET",
	"FUTEX_WAKE_BITSET", "FUTEX_WAIT_REQUEUE_PI", "FUTEX_CMP_REQUEUE_PI", "FUTEX_LOCK_PI2"}

const (
	futexPrivate  = 128
	futexRealtime = 256
	futexCmdMask  = ^uint64(futexPrivate | futexRealtime)
)

func futexOpName(op uint64) string {
	cmd := op & futexCmdMask
	name := fmt.Sprintf("op %d", cmd)
	if cmd < uint64(len(futexOps)) {
		name = futexOps[cmd]
	}
	if op&futexPrivate != 0 {
		name += "_PRIVATE"
	}
	if op&futexRealtime != 0 {
		name += "|FUTEX_CLOCK_REALTIME"
	}
	return name
}

func shortErr(err error) string {
	if errors.Is(err, procfs.ErrGone) {
		return "gone"
	}
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}
