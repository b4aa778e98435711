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
	// captures counts the starts and ends of captures: a comparison
	// across one (its last moves may come after the last read while it
	// ran, when this goroutine was not scheduled) is a new baseline, not
	// a beat.
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
	ticker := time.NewTicker(orDefault(p.Interval, time.Second))
	defer ticker.Stop()
	var st progressState
	if p.baseline(&st) {
		beat() // watching begins: see the type's doc
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
		if p.tick(&st) {
			beat()
		}
		if p.polled != nil {
			p.polled()
		}
	}
}

// progressState is what the last reading saw.
type progressState struct {
	captures uint64 // Progress.captures then
	ticks    uint64
	last     progress
	fresh    bool // last holds a reading to compare with
}

// baseline reads the counters without judging them, and reports whether
// the target could be read.
func (p *Progress) baseline(st *progressState) bool {
	st.captures = p.captures.Load()
	st.ticks, _ = processTicks(p.PID)
	var err error
	st.last, err = readProgress(p.PID)
	st.fresh = err == nil
	return st.fresh
}

// tick reads the target's progress once and reports whether it moved.
func (p *Progress) tick(st *progressState) bool {
	if p.quiet.Load() || p.captures.Load() != st.captures {
		// Keep the counters current without beating, so that the
		// first read after the capture compares with what the
		// capture left.
		p.baseline(st)
		return false
	}
	// One read answers for a process that uses CPU; the threads are read
	// only when it did not (their context switches tell a process that
	// sleeps and wakes).
	if t, err := processTicks(p.PID); err == nil && t != st.ticks {
		st.ticks, st.fresh = t, false
		return true
	}
	// A vanished target reads as no progress; the watchdog learns of the
	// exit from the process itself.
	cur, err := readProgress(p.PID)
	if err != nil {
		return false
	}
	moved := st.fresh && cur != st.last
	st.last, st.fresh = cur, true
	return moved
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
