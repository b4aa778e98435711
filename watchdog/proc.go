package watchdog

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Progress is the target's own progress as a heartbeat: a beat is any CPU
// time or context switch of any of its threads, or a thread starting or
// ending. It needs no cooperation from the target and catches a process
// that is frozen outright (stopped, deadlocked, stuck in the kernel); a
// target that is merely idle for longer than stall-after looks frozen too.
//
// The start of watching is its first beat. Other sources count a stall
// from the target's first beat, because a target may take a while to
// start beating; a process's progress needs no start, and a target frozen
// already when watching begins must stall stall-after later, not never.
//
// One reading is one system call: the process's CPU-time clock
// (clock_gettime on the clock clock_getcpuclockid names, which the kernel
// lets anyone read), the nanoseconds every thread of the process, live
// or ended, has run. Each of the events above moves it: a thread that is
// switched in runs before it is switched out, and starting or ending a
// thread is work done by one. Where that clock cannot be read, each
// thread's schedstat (time on CPU and times scheduled in) is read instead.
// A reading is the target's only if the target had not exited when it
// was taken: the pid may name another process by then (pidfd, and Start).
type Progress struct {
	PID int
	// Start, when not 0, is the target's start time (/proc/PID/stat's
	// starttime, clock ticks after boot): a process with the pid and
	// another start time is not the target (the pid was reused), and
	// nothing of it is read.
	Start    uint64
	Interval time.Duration // default 1s
	// Poller, when set, reads this target in the same wake-ups as its
	// other targets (a daemon's hundreds); else the source has its own.
	Poller *Poller

	// quiet is set while a capture runs: its snapshot stops and resumes
	// the target's threads one by one, which moves their counters even
	// when the target itself is frozen. What moved then is not a beat.
	quiet atomic.Bool
	// captures counts the starts and ends of captures: a comparison
	// across one (its last moves may come after the last read while it
	// ran, when the poller was not scheduled) is a new baseline, not a
	// beat.
	captures atomic.Uint64

	// polled, when set (by tests), is called after each tick's reading.
	polled func()
}

// captureRunning implements captureAware.
func (p *Progress) captureRunning(on bool) {
	p.quiet.Store(on)
	p.captures.Add(1)
}

func (p *Progress) String() string { return "proc " + strconv.Itoa(p.PID) }

// Run implements Source.
func (p *Progress) Run(ctx context.Context, beat func()) error {
	pl := p.Poller
	if pl == nil {
		pl = NewPoller()
	}
	e := pl.add(p, beat)
	defer pl.remove(e)
	<-ctx.Done()
	return ctx.Err()
}

// progressState is what the last reading saw.
type progressState struct {
	captures uint64 // Progress.captures then
	last     progress
	fresh    bool // last holds a reading to compare with
}

// progress is one reading. Either cpu (the process's CPU clock) is set,
// or the per-thread sums are: sums can collide only if one counter goes
// back, which the kernel's do not, except when a thread exits; the thread
// count and the sum of ids catch most of that.
type progress struct {
	cpu             uint64 // ns on CPU of every thread, live or ended
	threads, tidSum int
	runNanos        uint64 // schedstat: time on CPU
	slices          uint64 // schedstat: times scheduled in
	ticks           uint64 // stat: utime+stime, when schedstat is missing
	switches        uint64 // status: voluntary+involuntary context switches
}

// errGone is a target that no longer exists.
var errGone = errors.New("process gone")

// readProgress reads pid's progress once.
func readProgress(pid int) (progress, error) {
	var ts unix.Timespec
	// A raw system call: it never blocks, and Go's bookkeeping of one
	// that might (entersyscall) would let its monitor take the poller's
	// P away in the middle of a daemon's hundreds of readings.
	_, _, errno := unix.RawSyscall(unix.SYS_CLOCK_GETTIME, uintptr(processCPUClock(pid)), uintptr(unsafe.Pointer(&ts)), 0)
	var err error
	if errno != 0 {
		err = errno
	}
	switch err {
	case nil:
		return progress{cpu: uint64(ts.Nano())}, nil
	case unix.EINVAL, unix.ESRCH:
		return progress{}, errGone
	}
	return readThreads(pid)
}

// processCPUClock is the clock id of a process's CPU time, as
// clock_getcpuclockid(3) makes it: MAKE_PROCESS_CPUCLOCK(pid,
// CPUCLOCK_SCHED), the scheduler's nanoseconds.
func processCPUClock(pid int) int32 {
	const cpuclockSched = 2
	return ^int32(pid)<<3 | cpuclockSched
}

// readThreads sums the progress of every thread from /proc.
func readThreads(pid int) (progress, error) {
	tids, err := procfs.Threads(pid)
	if err != nil {
		return progress{}, err
	}
	pr := progress{threads: len(tids)}
	for _, tid := range tids {
		pr.tidSum += tid
		ss, err := procfs.ReadSchedstat(pid, tid)
		if err == nil {
			pr.runNanos += ss.RunNanos
			pr.slices += ss.Slices
			continue
		}
		if errors.Is(err, procfs.ErrGone) {
			continue // the thread ended between the listing and the read
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return progress{}, err
		}
		// No CONFIG_SCHED_INFO: CPU ticks and context switches.
		if st, err := procfs.ReadStat(pid, tid); err == nil {
			pr.ticks += st.Utime + st.Stime
		}
		if st, err := procfs.ReadStatus(pid, tid); err == nil {
			pr.switches += st.VoluntaryCtxtSwitches + st.NonvoluntaryCtxtSwitches
		}
	}
	return pr, nil
}
