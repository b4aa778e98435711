package watchdog

import (
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Poller reads the progress of many targets (Progress.Poller) from one
// timer: a daemon watching hundreds of processes wakes once per poll
// interval, not once per target. Each target is read on a grid of its
// interval that every target with that interval shares, so one wake-up
// reads them all; the first reading after a target joins comes within
// one interval, and every later one exactly an interval after the last,
// so a beat is seen within an interval of happening, as with a timer of
// its own. The grids are CLOCK_MONOTONIC's own (multiples of the interval
// from its zero), where the watchdogs' deadlines (rounded to their grain)
// and a daemon's exec batches fall too: one wake-up of the process serves
// them all. After the readings of a wake-up, one poll(2) of the targets'
// pidfds throws away those of targets that exited meanwhile (their pid
// may name another process already). A wake-up makes no system call the
// runtime accounts as one that may block: each would wake its monitor
// thread (sysmon) from its sleep.
//
// The zero value is not usable; NewPoller makes one. It needs no Run: its
// timer is armed while it has targets.
type Poller struct {
	clk   clock
	epoch time.Duration // the grids' origin on Mono

	mu      sync.Mutex
	entries []*pollEntry
	gen     uint64        // of the armed timer
	stop    func() bool   // of the armed timer; nil when none
	armedAt time.Duration // Mono it fires at
	fds     []unix.PollFd // scratch for the exit check
}

// NewPoller returns a poller with no targets.
func NewPoller() *Poller { return &Poller{clk: realClock{}} }

// newPoller is a poller on clk whose grids start now (tests' fake
// clocks).
func newPoller(clk clock) *Poller {
	return &Poller{clk: clk, epoch: clk.Now().Mono}
}

// pollEntry is one target of a poller. Only the poller touches it, under
// its lock.
type pollEntry struct {
	p        *Progress
	beat     func()
	interval time.Duration
	due      time.Duration // Mono of the next reading
	pidfd    int           // -1 when the kernel has none (before 5.3)
	gone     bool          // exited, or never the process asked for: not read
	first    bool          // the next reading is the baseline
	st       progressState

	// The reading in flight.
	cur      progress
	err      error
	rebase   bool
	captures uint64
}

// add starts reading p's target, and beats for the start of watching when
// it can be read.
func (pl *Poller) add(p *Progress, beat func()) *pollEntry {
	e := &pollEntry{p: p, beat: beat, interval: orDefault(p.Interval, time.Second), pidfd: -1, first: true}
	e.open()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	now := pl.clk.Now().Mono
	pl.read([]*pollEntry{e})
	e.due = pl.next(now, e.interval)
	pl.entries = append(pl.entries, e)
	pl.arm(now)
	return e
}

// open holds the target by a pidfd, and checks that the pid is still the
// target's.
func (e *pollEntry) open() {
	pid := e.p.PID
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case err == unix.ESRCH:
		e.gone = true
		return
	case err == nil:
		e.pidfd = fd
	}
	if e.p.Start != 0 {
		// After the pidfd: if this is the target, the pidfd holds it.
		st, err := procfs.ReadStat(pid, pid)
		if err != nil || st.StartTime != e.p.Start {
			e.gone = true
		}
	}
}

// remove stops reading e's target and closes its pidfd.
func (pl *Poller) remove(e *pollEntry) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if i := slices.Index(pl.entries, e); i >= 0 {
		pl.entries = slices.Delete(pl.entries, i, i+1)
	}
	if e.pidfd >= 0 {
		unix.Close(e.pidfd)
		e.pidfd = -1
	}
	if len(pl.entries) == 0 && pl.stop != nil {
		pl.stop()
		pl.stop = nil
	}
}

// next is the first point of interval's grid after now.
func (pl *Poller) next(now, interval time.Duration) time.Duration {
	return pl.epoch + ((now-pl.epoch)/interval+1)*interval
}

// arm makes the timer fire at the earliest reading due.
func (pl *Poller) arm(now time.Duration) {
	if len(pl.entries) == 0 {
		return
	}
	at := pl.entries[0].due
	for _, e := range pl.entries[1:] {
		at = min(at, e.due)
	}
	if pl.stop != nil {
		if pl.armedAt <= at {
			return
		}
		pl.stop()
	}
	pl.gen++
	gen := pl.gen
	pl.armedAt = at
	pl.stop = pl.clk.AfterFunc(max(at-now, 0), func() { pl.fire(gen) })
}

// fire reads every target due.
func (pl *Poller) fire(gen uint64) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if gen != pl.gen || pl.stop == nil {
		return // a timer stopped too late to stay silent
	}
	pl.stop = nil
	now := pl.clk.Now().Mono
	var due []*pollEntry
	for _, e := range pl.entries {
		if e.due <= now {
			due = append(due, e)
			e.due = pl.next(now, e.interval)
		}
	}
	pl.read(due)
	for _, e := range due {
		if e.p.polled != nil {
			e.p.polled()
		}
	}
	pl.arm(now)
}

// read takes one reading of each of es, and beats for those that moved.
func (pl *Poller) read(es []*pollEntry) {
	for _, e := range es {
		if e.gone {
			continue
		}
		// Whether a capture began or ended is known before the reading:
		// one that begins after it makes the next reading a baseline.
		e.captures = e.p.captures.Load()
		e.rebase = e.first || e.p.quiet.Load() || e.captures != e.st.captures
		e.cur, e.err = readProgress(e.p.PID)
	}
	pl.dropExited(es)
	for _, e := range es {
		if e.gone {
			continue
		}
		if e.rebase {
			// Keep the counters current without beating, so that the
			// first read after a capture compares with what it left.
			// The first reading, when watching begins, is a beat: see
			// Progress.
			e.st.captures = e.captures
			e.st.last, e.st.fresh = e.cur, e.err == nil
			if e.first && e.err == nil {
				e.beat()
			}
			e.first = false
			continue
		}
		// A vanished target reads as no progress; the watchdog learns
		// of the exit from the process itself.
		if e.err != nil {
			continue
		}
		moved := e.st.fresh && e.cur != e.st.last
		e.st.last, e.st.fresh = e.cur, true
		if moved {
			e.beat()
		}
	}
}

// dropExited marks gone the targets of es that exited: what was read by
// their pid may be another process's.
func (pl *Poller) dropExited(es []*pollEntry) {
	pl.fds = pl.fds[:0]
	for _, e := range es {
		if !e.gone && e.pidfd >= 0 {
			pl.fds = append(pl.fds, unix.PollFd{Fd: int32(e.pidfd), Events: unix.POLLIN})
		}
	}
	if len(pl.fds) == 0 {
		return
	}
	pollNow(pl.fds)
	j := 0
	for _, e := range es {
		if e.gone || e.pidfd < 0 {
			continue
		}
		if pl.fds[j].Revents != 0 {
			e.gone = true
		}
		j++
	}
}

// pollNow polls fds without waiting. A raw system call: with a zero
// timeout it never blocks.
func pollNow(fds []unix.PollFd) {
	var zero unix.Timespec
	for {
		_, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
		if errno != unix.EINTR {
			return
		}
	}
}
