package watchdog

import (
	"context"
	"time"
)

// Source is one heartbeat of the target.
type Source interface {
	// String names the source in logs and in a capture's trigger
	// ("file /run/app.beat").
	String() string
	// Run watches until ctx is done, calling beat at each heartbeat
	// (from any goroutine; beat never blocks). It returns ctx.Err() then,
	// or earlier with an error the source cannot get past.
	Run(ctx context.Context, beat func()) error
}

// captureAware is a source that a capture can make beat by itself (the
// target's progress moves when the snapshot stops and resumes its
// threads). The watchdog tells it when a capture runs.
type captureAware interface {
	captureRunning(on bool)
}

// PollInterval is how often a polling source looks, for a given
// stall-after: often enough that a beat is seen long before a stall could
// be declared, rarely enough to cost nothing when idle.
func PollInterval(stallAfter time.Duration) time.Duration {
	return min(max(stallAfter/10, 20*time.Millisecond), time.Second)
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
