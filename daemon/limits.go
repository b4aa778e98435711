package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/model"
)

// LimitError is a capture refused by a host-wide limit.
type LimitError struct {
	What string // "max-captures-per-hour", "disk-quota"
	Msg  string
}

func (e *LimitError) Error() string { return e.What + ": " + e.Msg }

// owner is whose budget a capture spends: its target's rule and user.
type owner struct {
	Rule string
	UID  int // -1: not known (a capture counted before budgets were kept by owner)
}

// spent is one stall capture written, or one on its way (pending).
type spent struct {
	At time.Time
	owner
}

// limits are the host-wide bounds on captures: how many run at once, how
// many stall captures an hour, and the disk quota. The hour's captures
// are shared: while processes of several users are watched, no user's
// take more than half of them, and no rule's of several (share), so that
// processes anyone can start (a rule that selects by command line) cannot
// spend the captures of another user's or another rule's. Only captures written count; one on its way holds
// its place until it ends.
type limits struct {
	state *stateFile
	quota *quota

	mu      sync.Mutex
	max     int
	running int
	freed   chan struct{} // closed and replaced when a slot frees
	perHour int
	rules   int     // rules in force: the rule share applies when there are several
	history []spent // stall captures written in the last hour, oldest first
	pending []*spent
	users   map[int]int // uid → its targets watched
}

func newLimits(maxConcurrent, perHour, rules int, st *stateFile, q *quota) *limits {
	l := &limits{state: st, quota: q, max: maxConcurrent, perHour: perHour, rules: rules, freed: make(chan struct{}), users: map[int]int{}}
	l.history = st.history(time.Now().Add(-time.Hour))
	return l
}

func (l *limits) set(maxConcurrent, perHour, rules int) {
	l.mu.Lock()
	l.max, l.perHour, l.rules = maxConcurrent, perHour, rules
	close(l.freed) // waiters look again at the new bound
	l.freed = make(chan struct{})
	l.mu.Unlock()
}

// watching counts a target of user uid in (n 1) or out (n -1).
func (l *limits) watching(uid, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.users[uid] += n; l.users[uid] <= 0 {
		delete(l.users, uid)
	}
}

// share is the most stall captures an hour one user's processes, or one
// rule's of several, may take: half the host's, at least one.
func (l *limits) share() int { return max(1, (l.perHour+1)/2) }

// acquire waits for a capture slot for a capture of who's target. A stall
// capture over the hour's bound (the host's, its user's share or its
// rule's), or any capture while the quota is exhausted, is refused at
// once. release(written) gives the slot back; a stall capture counts
// only when written.
func (l *limits) acquire(ctx context.Context, kind model.TriggerKind, who owner, log *slog.Logger) (release func(written bool), err error) {
	if err := l.quota.check(); err != nil {
		return nil, err
	}
	logged := false
	for {
		l.mu.Lock()
		now := time.Now()
		l.prune(now)
		if kind == model.Stall {
			if err := l.overBudget(now, who); err != nil {
				l.mu.Unlock()
				return nil, err
			}
		}
		if l.running < l.max {
			l.running++
			var p *spent
			if kind == model.Stall {
				p = &spent{At: now, owner: who}
				l.pending = append(l.pending, p)
			}
			l.mu.Unlock()
			return func(written bool) { l.release(p, written) }, nil
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

// overBudget refuses a stall capture of who's target past the host's
// bound, its user's share (while several users' processes are watched)
// or its rule's (while several rules are in force); l.mu is held.
func (l *limits) overBudget(now time.Time, who owner) error {
	if l.perHour <= 0 {
		return nil
	}
	all := append(append([]spent{}, l.history...), l.derefPending()...)
	refuse := func(count func(spent) bool, n int, whose string) error {
		var oldest time.Time
		c := 0
		for _, s := range all {
			if count(s) {
				if c == 0 || s.At.Before(oldest) {
					oldest = s.At
				}
				c++
			}
		}
		if c < n {
			return nil
		}
		next := oldest.Add(time.Hour).Sub(now).Round(time.Second)
		return &LimitError{What: "max-captures-per-hour", Msg: fmt.Sprintf("%d stall captures %s in the last hour; the next is allowed in %v", c, whose, next)}
	}
	if err := refuse(func(spent) bool { return true }, l.perHour, "on this host"); err != nil {
		return err
	}
	if who.UID >= 0 && len(l.users) > 1 {
		if err := refuse(func(s spent) bool { return s.UID == who.UID }, l.share(),
			fmt.Sprintf("of user %d's processes (half of max-captures-per-hour %d)", who.UID, l.perHour)); err != nil {
			return err
		}
	}
	if l.rules > 1 {
		if err := refuse(func(s spent) bool { return s.Rule == who.Rule }, l.share(),
			fmt.Sprintf("of rule %q's processes (half of max-captures-per-hour %d)", who.Rule, l.perHour)); err != nil {
			return err
		}
	}
	return nil
}

func (l *limits) derefPending() []spent {
	out := make([]spent, len(l.pending))
	for i, p := range l.pending {
		out[i] = *p
	}
	return out
}

func (l *limits) release(p *spent, written bool) {
	l.mu.Lock()
	l.running--
	if p != nil {
		for i, q := range l.pending {
			if q == p {
				l.pending = append(l.pending[:i], l.pending[i+1:]...)
				break
			}
		}
		if written {
			l.history = append(l.history, *p)
			l.state.saveHistory(l.history)
		}
	}
	close(l.freed)
	l.freed = make(chan struct{})
	l.mu.Unlock()
}

func (l *limits) prune(now time.Time) {
	i := 0
	for i < len(l.history) && now.Sub(l.history[i].At) >= time.Hour {
		i++
	}
	l.history = l.history[i:]
}

// counts returns the captures running and the stall captures written in
// the last hour.
func (l *limits) counts() (running, lastHour int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prune(time.Now())
	return l.running, len(l.history)
}
