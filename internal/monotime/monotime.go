// Package monotime reads CLOCK_MONOTONIC as plain nanoseconds: the clock
// perf samples (use_clockid) and jitdump records are stamped with, and
// therefore the one clock every time inside stallwatch is kept on.
//
// Now is CLOCK_MONOTONIC itself, not an estimate: it is the Go runtime's
// own reading of the clock (runtime.nanotime, the vDSO's
// clock_gettime(CLOCK_MONOTONIC) on Linux), so it costs no system call
// and is never ahead of a clock_gettime made after it nor behind one made
// before it. time.Now's monotonic reading is the same clock less a base
// the runtime keeps private, which is why it cannot serve: a base
// estimated from two readings around a system call is off by up to the
// call's length.
package monotime

import (
	"time"
	_ "unsafe" // go:linkname
)

// nanotime is the runtime's CLOCK_MONOTONIC reading. The runtime keeps
// this linkname for outside packages (runtime/time_nofake.go: "Do not
// remove or change the type signature", go.dev/issue/67401).
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// Now returns CLOCK_MONOTONIC in nanoseconds.
func Now() uint64 { return uint64(nanotime()) }

// Duration returns CLOCK_MONOTONIC as a time.Duration since the clock's
// origin (boot, less any time suspended).
func Duration() time.Duration { return time.Duration(nanotime()) }

// ToTime converts a CLOCK_MONOTONIC reading to wall-clock time, using the
// offset between the two clocks now. Good to the microsecond unless the
// wall clock is stepped in between.
func ToTime(mono uint64) time.Time {
	now := time.Now()
	return now.Add(-time.Duration(int64(Now()) - int64(mono)))
}

// UntilGrid is the time from now to the next multiple of every on
// CLOCK_MONOTONIC (every, when now is one): periodic work of a process
// put on such a grid falls on the same instants as the rest of its
// periodic work on that grid or a finer one, and one wake-up serves it
// all (a daemon's exec batches, tap reads and watchdog deadlines).
func UntilGrid(every time.Duration) time.Duration {
	return every - Duration()%every
}
