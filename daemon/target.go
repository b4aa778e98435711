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
	"github.com/stallwatch/stallwatch/continuous"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/procwatch"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify"
	"github.com/stallwatch/stallwatch/runtimes"
	"github.com/stallwatch/stallwatch/watchdog"
)

// target is one watched process: its watchdog and its capturer.
type target struct {
	facts      procwatch.Facts
	rule       *Rule
	log        *slog.Logger
	wd         *watchdog.Watchdog
	cap        *capturer
	heartbeats string
	since      time.Time
	cancel     context.CancelFunc
	done       chan struct{} // closed when the watchdog returned
	once       sync.Once
}

// startTarget starts watching process f under rule r. It runs on Run's
// goroutine and does not wait for anything slow: the session of a flight
// recorder opens on the target's own goroutine.
func (d *Daemon) startTarget(f procwatch.Facts, r *Rule) {
	log := d.log.With("pid", f.PID, "rule", r.Name)
	srcs, err := d.sources(f.ID, &r.Watch)
	if err != nil {
		log.Error("cannot watch the process", "err", err)
		return
	}
	names := make([]string, len(srcs))
	for i, s := range srcs {
		names[i] = s.String()
	}
	t := &target{facts: f, rule: r, log: log, heartbeats: strings.Join(names, ", "), since: time.Now(), done: make(chan struct{})}
	t.cap = &capturer{d: d, t: t, idle: d.opts.SessionIdle}
	t.wd, err = watchdog.New(watchdog.Config{
		PID: f.PID, Sources: srcs, StallAfter: r.Watch.StallAfter, RecaptureAfter: r.Watch.RecaptureAfter,
		MaxCaptures: r.Watch.MaxCaptures, Capturer: t.cap, Logger: log, Events: d.events(f, r),
	})
	if err != nil {
		log.Error("cannot watch the process", "err", err)
		d.taps.release(f.PID)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	d.targets[f.PID] = t
	d.lim.watching(f.UID, 1)
	d.forkParents = true
	d.newParents = append(d.newParents, f.PID)
	log.Info("watching", "command", commandLine(f.Cmdline, 120), "heartbeats", t.heartbeats)
	go func() {
		defer close(t.done)
		if t.cap.flightRecorder() {
			sess, err := t.cap.session()
			switch {
			case err != nil && t.cap.profiling():
				log.Warn("no continuous profile and no flight recorder; captures will have no history", "err", err)
			case err != nil:
				log.Warn("no flight recorder; captures will have no history", "err", err)
			case t.cap.profiling():
				t.cap.profile(sess)
			}
		}
		err := t.wd.Run(ctx)
		if err != nil && !errors.Is(err, watchdog.ErrTargetExited) {
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

// release closes what the target holds, once its watchdog returned.
func (t *target) release() {
	t.once.Do(func() {
		t.cap.close()
		t.cap.d.taps.release(t.facts.PID)
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

// capturer takes a target's captures within the host-wide limits. Its
// capture session opens when first needed; without a flight recorder it
// closes again after idle, so that an idle daemon holds no symbol tables.
type capturer struct {
	d    *Daemon
	t    *target
	idle time.Duration

	mu   sync.Mutex
	sess *capture.Session
	prof *continuous.Profiled // the continuous profile of sess, if any
	// dropped: the host's budget no longer profiles the target;
	// budgetRate and budgetOffCPU are what it lets it sample at.
	dropped      bool
	budgetRate   int
	budgetOffCPU bool
	timer        *time.Timer
	closed       bool
	waiters      []*waiter
	inflight     int           // captures running
	settled      chan struct{} // closed when inflight drops to 0
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

// flightRecorder reports whether the target's session samples between
// captures — for a flight recorder or a continuous profile — and so stays
// open.
func (c *capturer) flightRecorder() bool {
	cfg := &c.t.rule.Watch.Capture
	return !cfg.NoFlightRecorder && cfg.BaselineFreq != 0 || c.profiling()
}

// profiling reports whether the target's rule profiles it continuously
// (and the host's budget has not dropped it).
func (c *capturer) profiling() bool {
	c.mu.Lock()
	dropped := c.dropped
	c.mu.Unlock()
	return c.ruleProfiles() && !dropped
}

// ruleProfiles reports whether the target's rule asks for a continuous
// profile the daemon can take.
func (c *capturer) ruleProfiles() bool {
	return c.t.rule.Watch.ProfilePeriod > 0 && c.d.opts.Profiles != nil
}

// profiledInfo is what the budget weighs of the target, when its rule
// profiles it.
func (c *capturer) profiledInfo() (profiled, bool) {
	if !c.ruleProfiles() {
		return profiled{}, false
	}
	threads := 1
	if tids, err := procfs.Threads(c.t.facts.PID); err == nil {
		threads = len(tids)
	}
	cfg := &c.t.rule.Watch.Capture
	return profiled{pid: c.t.facts.PID, threads: threads, freq: cfg.ProfileFreq, offCPU: cfg.ProfileOffCPU && !cfg.NoOffCPU}, true
}

// applyBudget puts the budget's step in force for the target: its rate
// and off-CPU sampling, the mark on its periods, or no profile at all
// (dropped), or the profile again. It runs on the daemon's loop and does
// nothing slow there.
func (c *capturer) applyBudget(step degradation, dropped bool, b Budget) {
	if !c.ruleProfiles() {
		return
	}
	cfg := &c.t.rule.Watch.Capture
	freq := rateAt(cfg.ProfileFreq, step.halvings)
	offCPU := cfg.ProfileOffCPU && !step.noOffCPU
	value, note := step.mark(cfg.ProfileFreq, b)
	c.mu.Lock()
	sess, pt, was := c.sess, c.prof, c.dropped
	c.dropped, c.budgetRate, c.budgetOffCPU = dropped, freq, offCPU
	if dropped {
		c.prof = nil
	}
	c.mu.Unlock()
	switch {
	case dropped && pt != nil:
		pt.Mark("profile_degraded", "dropped", fmt.Sprintf("the daemon no longer profiles this process, to keep within its budget (%s of a core, %d descriptors): %s", pct(b.CPU), b.FDs, step.String()))
		go func() {
			pt.Stop()
			if sess != nil {
				_ = sess.SetProfileRate(0, false)
			}
			c.done() // the session closes when idle, unless a flight recorder keeps it
		}()
	case !dropped && was:
		go func() {
			if s, err := c.session(); err == nil {
				c.profile(s)
			}
		}()
	case !dropped && sess != nil && pt != nil:
		if err := sess.SetProfileRate(freq, offCPU); err != nil {
			c.t.log.Warn("changing the continuous profile's rate", "err", err)
		}
		pt.Mark("profile_degraded", value, note)
	}
}

// profile begins the target's continuous profile from sess, at the rate
// the host's budget allows now.
func (c *capturer) profile(sess *capture.Session) {
	c.mu.Lock()
	freq, offCPU := c.budgetRate, c.budgetOffCPU
	c.mu.Unlock()
	if freq > 0 {
		if err := sess.SetProfileRate(freq, offCPU); err != nil {
			c.t.log.Warn("setting the continuous profile's rate", "err", err)
		}
	}
	n := &c.t.rule.Watch.Notify
	pt := c.d.opts.Profiles.Add(continuous.Target{PID: c.t.facts.PID, Process: runtimes.ProcessName(c.t.facts.Exe, c.t.facts.Cmdline, c.t.facts.Comm),
		Tags: n.Tags, Source: sess, Period: c.t.rule.Watch.ProfilePeriod})
	sess.ProfiledIn(pt.Dir(), c.t.rule.Watch.ProfilePeriod, c.d.opts.Uploads != nil)
	c.mu.Lock()
	closed := c.closed
	if !closed {
		c.prof = pt
	}
	c.mu.Unlock()
	if closed {
		pt.Stop()
		return
	}
	// Under a budget that profiles less, the target is profiled as the
	// others are (the daemon's loop owns the budget).
	go c.d.call(func() {
		if d := c.d; d.budget.step != (degradation{}) {
			c.applyBudget(d.budget.step, d.budget.dropped(c.t.facts.PID), d.budget.budget)
		}
	})
}

// session returns the open capture session, opening it if need be.
func (c *capturer) session() (*capture.Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("the target is no longer watched")
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if c.sess != nil {
		return c.sess, nil
	}
	cfg := c.t.rule.Watch.Capture
	cfg.PID, cfg.Out, cfg.Keep, cfg.Snapshot = c.t.facts.PID, c.d.out, int(c.d.keep.Load()), true
	cfg.Heartbeat, cfg.Logger = c.t.heartbeats, c.t.log
	if c.d.opts.Uploads != nil {
		cfg.Uploads = c.d.opts.Uploads
	}
	s, err := capture.Open(cfg)
	if err != nil {
		return nil, err
	}
	c.sess = s
	return s, nil
}

// done ends a use of the session: without a flight recorder it closes
// after idle.
func (c *capturer) done() {
	if c.flightRecorder() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess == nil || c.closed {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	c.timer = time.AfterFunc(c.idle, c.closeIdle)
}

func (c *capturer) closeIdle() {
	c.mu.Lock()
	s := c.sess
	c.sess, c.timer = nil, nil
	c.mu.Unlock()
	if s != nil {
		if err := s.Close(); err != nil {
			c.t.log.Warn("closing the capture session", "err", err)
		}
	}
}

// finishGrace bounds how long closing a target waits for its capture in
// progress (cut short) to be written.
const finishGrace = time.Minute

func (c *capturer) close() {
	c.mu.Lock()
	c.closed = true
	if c.inflight > 0 {
		settled := c.settled
		c.mu.Unlock()
		select {
		case <-settled:
		case <-time.After(finishGrace):
			c.t.log.Error("the capture in progress was not written in time; closing its session", "waited", finishGrace)
		}
		c.mu.Lock()
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	s, pt := c.sess, c.prof
	c.sess, c.prof = nil, nil
	ws := c.waiters
	c.waiters = nil
	c.mu.Unlock()
	if pt != nil {
		pt.Stop() // its last period, before the session closes
	}
	for _, w := range ws {
		w.done <- captureOutcome{err: errors.New("the process is no longer watched")}
	}
	if s != nil {
		if err := s.Close(); err != nil {
			c.t.log.Warn("closing the capture session", "err", err)
		}
	}
}

// Capture implements watchdog.Capturer: it waits for a host-wide slot,
// then captures through the session.
func (c *capturer) Capture(ctx context.Context, tr model.Trigger) (*model.Result, error) {
	started := time.Now()
	res, err := c.capture(ctx, tr)
	if tr.Kind == model.Signal {
		c.answer(started, res, err)
	}
	return res, err
}

func (c *capturer) capture(ctx context.Context, tr model.Trigger) (*model.Result, error) {
	c.mu.Lock()
	if c.inflight == 0 {
		c.settled = make(chan struct{})
	}
	c.inflight++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.inflight--; c.inflight == 0 {
			close(c.settled)
		}
		c.mu.Unlock()
	}()
	c.d.captures.Add(1)
	release, err := c.d.lim.acquire(ctx, tr.Kind, owner{Rule: c.t.rule.Name, UID: c.t.facts.UID}, c.t.log)
	if err != nil {
		return nil, err
	}
	var res *model.Result
	defer func() { release(res != nil) }()
	s, err := c.session()
	if err != nil {
		return nil, err
	}
	defer c.done()
	res, err = s.Capture(ctx, tr)
	if res != nil {
		c.d.quota.written(res.Dir)
	}
	return res, err
}

// Recovered implements watchdog.Capturer.
func (c *capturer) Recovered(res *model.Result, stall time.Duration) error {
	s, err := c.session()
	if err != nil {
		return err
	}
	defer c.done()
	return s.Recovered(res, stall)
}

// wait registers a control request for the next capture asked for from
// now on.
func (c *capturer) wait() *waiter {
	w := &waiter{asked: time.Now(), done: make(chan captureOutcome, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		w.done <- captureOutcome{err: errors.New("the process is no longer watched")}
		return w
	}
	c.waiters = append(c.waiters, w)
	return w
}

// answer hands a capture asked for to the requests made before it began.
func (c *capturer) answer(started time.Time, res *model.Result, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		if w.asked.After(started) {
			keep = append(keep, w)
			continue
		}
		w.done <- captureOutcome{res, err}
	}
	c.waiters = keep
}
