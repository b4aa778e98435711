package watchdog

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
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
// Every beat reads the clock, so it must be cheap: CLOCK_MONOTONIC and the
// wall clock come from time.Now (the vDSO, no system call), and
// CLOCK_BOOTTIME, which the vDSO gives Go no way to read, is kept as its
// offset from CLOCK_MONOTONIC, read again by a system call at most once a
// second of CLOCK_MONOTONIC, and whenever a deadline fires (syncBoot): the
// one moment a suspend must be seen, to re-arm instead of blaming the
// target. A beat in the first second after a resume may carry the offset
// from before the suspend; the deadline's fresh reading then shows the
// suspend, and the watchdog re-arms once (a stall-after later than
// needed, never a false stall).
type realClock struct{}

// monoBase pairs a time.Time, whose monotonic reading Go keeps, with
// CLOCK_MONOTONIC read at the same moment (between two time.Now calls a
// system call apart): instant.Mono must be CLOCK_MONOTONIC itself, the
// clock perf stamps samples with (capdir.Trigger.Mono).
var monoBase = func() struct {
	t    time.Time
	mono time.Duration
} {
	t1 := time.Now()
	m := clockNow(unix.CLOCK_MONOTONIC)
	t2 := time.Now()
	return struct {
		t    time.Time
		mono time.Duration
	}{t1.Add(t2.Sub(t1) / 2), m}
}()

// bootReading is CLOCK_BOOTTIME − CLOCK_MONOTONIC as read at Mono.
type bootReading struct {
	mono, offset time.Duration
}

var bootCache atomic.Pointer[bootReading]

// bootRefresh is how stale the boot clock's offset may grow between beats.
const bootRefresh = time.Second

func (realClock) Now() instant {
	w := time.Now()
	mono := monoBase.mono + w.Sub(monoBase.t)
	r := bootCache.Load()
	if r == nil || mono-r.mono >= bootRefresh || mono < r.mono {
		r = readBoot(mono)
	}
	return instant{Mono: mono, Boot: mono + r.offset, Wall: w}
}

// syncBoot reads CLOCK_BOOTTIME afresh: a deadline fired.
func (realClock) syncBoot() {
	w := time.Now()
	readBoot(monoBase.mono + w.Sub(monoBase.t))
}

func readBoot(mono time.Duration) *bootReading {
	r := &bootReading{mono: mono, offset: clockNow(unix.CLOCK_BOOTTIME) - mono}
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

func clockNow(id int32) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		panic("clock_gettime: " + err.Error()) // cannot fail for these clocks on Linux
	}
	return time.Duration(ts.Nano())
}
