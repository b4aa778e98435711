package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
)

// LimitError is a capture refused by a host-wide limit.
type LimitError struct {
	What string // "max-captures-per-hour", "disk-quota"
	Msg  string
}

func (e *LimitError) Error() string { return e.What + ": " + e.Msg }

// limits are the host-wide bounds on captures: how many run at once, how
// many stall captures an hour, and the disk quota.
type limits struct {
	state *stateFile
	quota *quota

	mu      sync.Mutex
	max     int
	running int
	freed   chan struct{} // closed and replaced when a slot frees
	perHour int
	history []time.Time // stall captures of the last hour, oldest first
}

func newLimits(maxConcurrent, perHour int, st *stateFile, q *quota) *limits {
	l := &limits{state: st, quota: q, max: maxConcurrent, perHour: perHour, freed: make(chan struct{})}
	l.history = st.history(time.Now().Add(-time.Hour))
	return l
}

func (l *limits) set(maxConcurrent, perHour int) {
	l.mu.Lock()
	l.max, l.perHour = maxConcurrent, perHour
	close(l.freed) // waiters look again at the new bound
	l.freed = make(chan struct{})
	l.mu.Unlock()
}

// acquire waits for a capture slot; release gives it back. A stall
// capture over the hourly bound, or any capture while the quota is
// exhausted, is refused at once.
func (l *limits) acquire(ctx context.Context, kind capdir.TriggerKind, log *slog.Logger) (release func(), err error) {
	if err := l.quota.check(); err != nil {
		return nil, err
	}
	logged := false
	for {
		l.mu.Lock()
		now := time.Now()
		l.prune(now)
		if kind == capdir.Stall && l.perHour > 0 && len(l.history) >= l.perHour {
			next := l.history[0].Add(time.Hour).Sub(now).Round(time.Second)
			l.mu.Unlock()
			return nil, &LimitError{What: "max-captures-per-hour", Msg: fmt.Sprintf("%d stall captures on this host in the last hour; the next is allowed in %v", l.perHour, next)}
		}
		if l.running < l.max {
			l.running++
			if kind == capdir.Stall {
				l.history = append(l.history, now)
				l.state.saveHistory(l.history)
			}
			l.mu.Unlock()
			return l.release, nil
		}
		freed := l.freed
		running := l.running
		l.mu.Unlock()
		if !logged {
			log.Info("waiting for a capture slot", "running", running, "max_concurrent_captures", l.max)
			logged = true
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a capture slot: %w", context.Cause(ctx))
		}
	}
}

func (l *limits) release() {
	l.mu.Lock()
	l.running--
	close(l.freed)
	l.freed = make(chan struct{})
	l.mu.Unlock()
}

func (l *limits) prune(now time.Time) {
	i := 0
	for i < len(l.history) && now.Sub(l.history[i]) >= time.Hour {
		i++
	}
	l.history = l.history[i:]
}

// counts returns the captures running and the stall captures of the last
// hour.
func (l *limits) counts() (running, lastHour int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prune(time.Now())
	return l.running, len(l.history)
}
