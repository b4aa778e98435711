package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/procwatch"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify"
	"github.com/stallwatch/stallwatch/runtimes"
	"github.com/stallwatch/stallwatch/watch"
	"github.com/stallwatch/stallwatch/watchdog"
)

// target is one watched process: its watch (package watch: heartbeats,
// capture session, continuous profile, watchdog) within the host's
// limits.
type target struct {
	facts  procwatch.Facts
	rule   *Rule
	log    *slog.Logger
	w      *watch.Watch
	gate   *gate
	since  time.Time
	cancel context.CancelFunc
	done   chan struct{} // closed when the watch returned
	once   sync.Once
}

// startTarget starts watching process f under rule r. It runs on Run's
// goroutine and does not wait for anything slow: the session of a flight
// recorder or a continuous profile opens on the target's own goroutine.
func (d *Daemon) startTarget(f procwatch.Facts, r *Rule) {
	log := d.log.With("pid", f.PID, "rule", r.Name)
	t := &target{facts: f, rule: r, log: log, since: time.Now(), done: make(chan struct{})}
	t.gate = &gate{d: d, t: t}
	settings := r.Watch.Settings
	settings.Capture.Out = d.out
	if d.opts.Uploads != nil {
		settings.Capture.Uploads = d.opts.Uploads
	}
	var err error
	t.w, err = watch.New(watch.Config{
		PID: f.PID, Start: f.Start, Settings: settings, Poller: d.poller, Taps: d.taps, Gate: t.gate,
		SessionIdle: d.opts.SessionIdle, Opening: func(c *capture.Config) { c.Keep = int(d.keep.Load()) },
		Profiler: d.opts.Profiles, Process: runtimes.ProcessName(f.Exe, f.Cmdline, f.Comm), Tags: r.Watch.Notify.Tags,
		ProfileBegun: func(string) { go d.call(t.budgetAgain) },
		Events:       d.events(f, r), Logger: log,
	})
	if err != nil {
		log.Error("cannot watch the process", "err", err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	d.targets[f.PID] = t
	d.lim.watching(f.UID, 1)
	d.forkParents = true
	d.newParents = append(d.newParents, f.PID)
	log.Info("watching", "command", commandLine(f.Cmdline, 120), "heartbeats", t.w.Heartbeats())
	go func() {
		defer close(t.done)
		if err := t.w.Open(); err != nil && !errors.Is(err, watch.ErrTargetExited) {
			if t.w.Profiling() {
				log.Warn("no continuous profile and no flight recorder; captures will have no history", "err", err)
			} else {
				log.Warn("no flight recorder; captures will have no history", "err", err)
			}
		}
		err := t.w.Run(ctx)
		if err != nil && !errors.Is(err, watch.ErrTargetExited) {
			log.Error("watchdog stopped", "err", err)
		}
		if ctx.Err() == nil {
			select {
			case d.exits <- t:
			case <-d.stopped:
			}
		}
	}()
}

// events is the handler of what f's watchdog sees, as rule r names and
// tags it (nil when nothing is to be told).
func (d *Daemon) events(f procwatch.Facts, r *Rule) func(watchdog.Event) {
	if d.opts.Events == nil {
		return nil
	}
	n := &r.Watch.Notify
	return d.opts.Events(notify.Target{PID: f.PID, Process: runtimes.ProcessName(f.Exe, f.Cmdline, f.Comm), Service: n.Service, Tags: n.Tags,
		OnCapture: n.OnCapture, OnRecover: n.OnRecover})
}

// release closes what the target holds, once its watch returned.
func (t *target) release() {
	t.once.Do(func() {
		t.w.Close()
		t.gate.close()
	})
}

// commandLine is a command line for logs and status, at most n bytes.
func commandLine(args []string, n int) string {
	s := strings.Join(args, " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// profiledInfo is what the budget weighs of the target, when its rule
// profiles it.
func (t *target) profiledInfo() (profiled, bool) {
	if !t.ruleProfiles() {
		return profiled{}, false
	}
	threads := 1
	if tids, err := procfs.Threads(t.facts.PID); err == nil {
		threads = len(tids)
	}
	cfg := &t.rule.Watch.Capture
	return profiled{pid: t.facts.PID, threads: threads, freq: cfg.ProfileFreq, offCPU: cfg.ProfileOffCPU && !cfg.NoOffCPU}, true
}

// ruleProfiles reports whether the target's rule asks for a continuous
// profile the daemon can take.
func (t *target) ruleProfiles() bool {
	return t.rule.Watch.ProfilePeriod > 0 && t.gate.d.opts.Profiles != nil
}

// applyBudget puts the budget's step in force for the target: its rate
// and off-CPU sampling, the mark on its periods, or no profile at all
// (dropped), or the profile again. It runs on the daemon's loop and does
// nothing slow there.
func (t *target) applyBudget(step degradation, dropped bool, b Budget) {
	if !t.ruleProfiles() {
		return
	}
	if dropped {
		t.w.DropProfile("profile_degraded", "dropped", fmt.Sprintf("the daemon no longer profiles this process, to keep within its budget (%s of a core, %d descriptors): %s", pct(b.CPU), b.FDs, step.String()))
		return
	}
	cfg := &t.rule.Watch.Capture
	value, note := step.mark(cfg.ProfileFreq, b)
	t.w.ProfileAt(rateAt(cfg.ProfileFreq, step.halvings), cfg.ProfileOffCPU && !step.noOffCPU, "profile_degraded", value, note)
}

// budgetAgain puts the budget's step in force on a profile that just
// began, under a budget that profiles less (on the daemon's loop, which
// owns the budget).
func (t *target) budgetAgain() {
	if d := t.gate.d; d.budget.step != (degradation{}) {
		t.applyBudget(d.budget.step, d.budget.dropped(t.facts.PID), d.budget.budget)
	}
}

// gate admits a target's captures within the host-wide limits (a slot
// among the concurrent captures, the hourly budgets, the disk quota),
// and hands a capture asked for on the control socket to the requests
// waiting for it.
type gate struct {
	d *Daemon
	t *target

	mu      sync.Mutex
	closed  bool
	waiters []*waiter
}

// waiter is a control request waiting for a capture asked for at asked.
type waiter struct {
	asked time.Time
	done  chan captureOutcome
}

type captureOutcome struct {
	res *model.Result
	err error
}

// Admit implements watch.Gate: it waits for a host-wide slot; once the
// capture is over the slot is freed, what it wrote counted against the
// quota, and a capture asked for answers the requests made before it.
func (g *gate) Admit(ctx context.Context, tr model.Trigger) (func(*model.Result, error), error) {
	started := time.Now()
	g.d.captures.Add(1)
	release, err := g.d.lim.acquire(ctx, tr.Kind, owner{Rule: g.t.rule.Name, UID: g.t.facts.UID}, g.t.log)
	if err != nil {
		g.over(started, tr, nil, err)
		return nil, err
	}
	return func(res *model.Result, err error) {
		if res != nil {
			g.d.quota.written(res.Dir)
		}
		release(res != nil)
		g.over(started, tr, res, err)
	}, nil
}

// over answers the requests for a capture asked for that were made
// before it began.
func (g *gate) over(started time.Time, tr model.Trigger, res *model.Result, err error) {
	if tr.Kind != model.Signal {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	keep := g.waiters[:0]
	for _, w := range g.waiters {
		if w.asked.After(started) {
			keep = append(keep, w)
			continue
		}
		w.done <- captureOutcome{res, err}
	}
	g.waiters = keep
}

// wait registers a control request for the next capture asked for from
// now on.
func (g *gate) wait() *waiter {
	w := &waiter{asked: time.Now(), done: make(chan captureOutcome, 1)}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		w.done <- captureOutcome{err: errors.New("the process is no longer watched")}
		return w
	}
	g.waiters = append(g.waiters, w)
	return w
}

// close answers the requests still waiting: the process is no longer
// watched.
func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	ws := g.waiters
	g.waiters = nil
	g.mu.Unlock()
	for _, w := range ws {
		w.done <- captureOutcome{err: errors.New("the process is no longer watched")}
	}
}
