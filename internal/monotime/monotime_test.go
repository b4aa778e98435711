package monotime

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func syscallMono(t *testing.T) uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return uint64(ts.Nano())
}

// TestNowIsClockMonotonic: Now is the clock itself, ordered between
// system calls made before and after it, however loaded the host is.
func TestNowIsClockMonotonic(t *testing.T) {
	for range 1000 {
		before := syscallMono(t)
		now := Now()
		after := syscallMono(t)
		if now < before || now > after {
			t.Fatalf("Now %d outside [%d, %d], the clock_gettime(CLOCK_MONOTONIC) calls around it", now, before, after)
		}
	}
}

// TestToTime: a reading taken now converts to about now.
func TestToTime(t *testing.T) {
	before := time.Now()
	got := ToTime(Now())
	after := time.Now()
	if got.Before(before.Add(-time.Millisecond)) || got.After(after.Add(time.Millisecond)) {
		t.Errorf("ToTime(Now()) = %v, outside [%v, %v]", got, before, after)
	}
}

func TestUntilGrid(t *testing.T) {
	for _, every := range []time.Duration{time.Millisecond, 100 * time.Millisecond, time.Second} {
		before := Duration()
		d := UntilGrid(every)
		after := Duration()
		if d <= 0 || d > every {
			t.Errorf("UntilGrid(%v) = %v: not in (0, %v]", every, d, every)
		}
		// The clock read inside was between the two readings around
		// the call, and d from it is a multiple of every: the first
		// multiple at or after before+d is at most after+d.
		first := (before + d + every - 1) / every * every
		if first > after+d {
			t.Errorf("UntilGrid(%v) = %v, read between %v and %v: no multiple of it at %v..%v", every, d, before, after, before+d, after+d)
		}
	}
}
