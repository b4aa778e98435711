package watchdog

import (
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
type realClock struct{}

func (realClock) Now() instant {
	return instant{Mono: clockNow(unix.CLOCK_MONOTONIC), Boot: clockNow(unix.CLOCK_BOOTTIME), Wall: time.Now()}
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
