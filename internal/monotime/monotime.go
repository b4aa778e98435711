// Package monotime reads CLOCK_MONOTONIC as plain nanoseconds: the clock
// perf samples (use_clockid) and jitdump records are stamped with, and
// therefore the one clock every time inside stallwatch is kept on.
package monotime

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now returns CLOCK_MONOTONIC in nanoseconds.
func Now() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("clock_gettime(CLOCK_MONOTONIC): " + err.Error()) // cannot fail on Linux
	}
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

// ToTime converts a CLOCK_MONOTONIC reading to wall-clock time, using the
// offset between the two clocks now. Good to the microsecond unless the
// wall clock is stepped in between.
func ToTime(mono uint64) time.Time {
	now := time.Now()
	return now.Add(-time.Duration(int64(Now()) - int64(mono)))
}
