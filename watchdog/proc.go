package watchdog

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"sync/atomic"
	"time"

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
type Progress struct {
	PID      int
	Interval time.Duration // default 1s

	// quiet is set while a capture runs: its snapshot stops and resumes
	// the target's threads one by one, which moves their counters even
	// when the target itself is frozen. What moved then is not a beat.
	quiet atomic.Bool
}

// captureRunning implements captureAware.
func (p *Progress) captureRunning(on bool) { p.quiet.Store(on) }

func (p *Progress) String() string { return "proc " + strconv.Itoa(p.PID) }

// Run implements Source.
func (p *Progress) Run(ctx context.Context, beat func()) error {
	ticker := time.NewTicker(orDefault(p.Interval, time.Second))
	defer ticker.Stop()
	ticks, _ := processTicks(p.PID)
	last, err := readProgress(p.PID)
	fresh := err == nil
	if fresh {
		beat() // watching begins: see the type's doc
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
		if p.quiet.Load() {
			// Keep the counters current without beating, so that
			// the first read after the capture compares with what
			// the capture left.
			ticks, _ = processTicks(p.PID)
			last, err = readProgress(p.PID)
			fresh = err == nil
			continue
		}
		// One read answers for a process that uses CPU; the threads
		// are read only when it did not (their context switches tell
		// a process that sleeps and wakes).
		if t, err := processTicks(p.PID); err == nil && t != ticks {
			ticks, fresh = t, false
			beat()
			continue
		}
		// A vanished target reads as no progress; the watchdog learns
		// of the exit from the process itself.
		cur, err := readProgress(p.PID)
		if err != nil {
			continue
		}
		if fresh && cur != last {
			beat()
		}
		last, fresh = cur, true
	}
}

// processTicks is the CPU time of the whole process (every thread, live
// or exited), in clock ticks.
func processTicks(pid int) (uint64, error) {
	b, err := procfs.ReadLimited(procfs.PidPath(pid, "stat"), 4096)
	if err != nil {
		return 0, err
	}
	st, err := procfs.ParseStat(b)
	return st.Utime + st.Stime, err
}

// progress sums what only moves when a thread runs. Sums can collide only
// if one counter goes back, which the kernel's do not, except when a
// thread exits; the thread count and the sum of ids catch most of that.
type progress struct {
	threads, tidSum int
	runNanos        uint64 // schedstat: time on CPU
	slices          uint64 // schedstat: times scheduled in
	ticks           uint64 // stat: utime+stime, when schedstat is missing
	switches        uint64 // status: voluntary+involuntary context switches
}

func readProgress(pid int) (progress, error) {
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
