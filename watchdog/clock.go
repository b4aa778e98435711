package watchdog

import (
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/monotime"
)

// instant is one reading of the clocks the detector needs: CLOCK_MONOTONIC
// to measure silences (it stops while the host is suspended, as the target
// does), CLOCK_BOOTTIME to notice that the host was suspended, and the wall
// clock for what people read.
type instant struct {
	Mono time.Duration
	Boot time.Duration
	Wall time.Time
}

// Sub is the monotonic time from b to a.
func (a instant) Sub(b instant) time.Duration { return a.Mono - b.Mono }

// Add moves every clock of a by d.
func (a instant) Add(d time.Duration) instant {
	return instant{Mono: a.Mono + d, Boot: a.Boot + d, Wall: a.Wall.Add(d)}
}

// Before reports whether a is earlier than b on the monotonic clock.
func (a instant) Before(b instant) bool { return a.Mono < b.Mono }

// suspendOffset grows by the time the host spent suspended.
func (a instant) suspendOffset() time.Duration { return a.Boot - a.Mono }

// clock is what the watchdog reads time from and waits on; tests inject a
// fake one.
type clock interface {
	Now() instant
	// AfterFunc calls f in its own goroutine after d; stop cancels it.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// realClock is the system's clocks. Go's timers run on CLOCK_MONOTONIC,
// the same clock as instant.Mono.
//
// Every beat reads the clock, so it must be cheap. instant.Mono is
// CLOCK_MONOTONIC itself, read as the runtime reads it (package
// internal/monotime: the vDSO, no system call), because perf stamps
// samples with that clock and a trigger's moment is compared with them
// (model.Trigger.Mono); the wall clock comes from time.Now.
// CLOCK_BOOTTIME, which the vDSO gives Go no way to read, is kept as its
// offset from CLOCK_MONOTONIC, read again by a system call at most once a
// second of CLOCK_MONOTONIC, and whenever a deadline fires (syncBoot): the
// one moment a suspend must be seen, to re-arm instead of blaming the
// target. A beat in the first second after a resume may carry the offset
// from before the suspend; the deadline's fresh reading then shows the
// suspend, and the watchdog re-arms once (a stall-after later than
// needed, never a false stall).
type realClock struct{}

// bootReading is CLOCK_BOOTTIME − CLOCK_MONOTONIC as read at Mono.
type bootReading struct {
	mono, offset time.Duration
}

var bootCache atomic.Pointer[bootReading]

// bootRefresh is how stale the boot clock's offset may grow between beats.
const bootRefresh = time.Second

func (realClock) Now() instant {
	mono := monotime.Duration()
	w := time.Now()
	r := bootCache.Load()
	if r == nil || mono-r.mono >= bootRefresh || mono < r.mono {
		r = readBoot(mono)
	}
	return instant{Mono: mono, Boot: mono + r.offset, Wall: w}
}

// syncBoot reads CLOCK_BOOTTIME afresh: a deadline fired.
func (realClock) syncBoot() { readBoot(monotime.Duration()) }

// readBoot reads CLOCK_BOOTTIME − CLOCK_MONOTONIC, the time the host
// spent suspended: CLOCK_BOOTTIME read between two CLOCK_MONOTONIC
// readings, against their midpoint, so the offset is good to half the
// system call's length — retried a few times when a preemption came in
// between, keeping the closest pair. mono is when it applies.
func readBoot(mono time.Duration) *bootReading {
	best, width := time.Duration(0), time.Duration(-1)
	for range 4 {
		m1 := monotime.Duration()
		b := clockNow(unix.CLOCK_BOOTTIME)
		m2 := monotime.Duration()
		if w := m2 - m1; width < 0 || w < width {
			best, width = b-(m1+(m2-m1)/2), w
		}
		if width <= 50*time.Microsecond {
			break
		}
	}
	r := &bootReading{mono: mono, offset: best}
	bootCache.Store(r)
	return r
}

// bootSyncer is a clock whose CLOCK_BOOTTIME can be read afresh.
type bootSyncer interface{ syncBoot() }

// syncBoot makes clk's next reading of CLOCK_BOOTTIME exact.
func syncBoot(clk clock) {
	if s, ok := clk.(bootSyncer); ok {
		s.syncBoot()
	}
}

func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// clockNow reads clock id by a raw system call: it never blocks, and the
// runtime's bookkeeping of one that might wakes its monitor thread
// (sysmon) from its sleep — at every deadline of every target of an
// idle daemon.
func clockNow(id int32) time.Duration {
	var ts unix.Timespec
	if _, _, errno := unix.RawSyscall(unix.SYS_CLOCK_GETTIME, uintptr(id), uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic("clock_gettime: " + errno.Error()) // cannot fail for these clocks on Linux
	}
	return time.Duration(ts.Nano())
}
