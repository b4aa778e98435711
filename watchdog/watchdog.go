package watchdog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/model"
)

// Capturer takes the captures the watchdog asks for.
type Capturer interface {
	// Capture runs one capture (blocks ~capture-for); ctx cancelled → cut
	// short, still written.
	Capture(ctx context.Context, tr model.Trigger) (*model.Result, error)
	// Recovered records that the stall a capture belonged to ended.
	Recovered(res *model.Result, stall time.Duration) error
}

// Config configures a Watchdog.
type Config struct {
	// PID is the target. The watchdog stops when it exits; 0 follows no
	// process.
	PID int
	// Sources are the heartbeats; a stall is any of them silent for
	// StallAfter after it has beaten once.
	Sources    []Source
	StallAfter time.Duration // default 10s
	// RecaptureAfter is the time between captures of a stall that lasts
	// (default 5m).
	RecaptureAfter time.Duration
	// MaxCaptures bounds stall captures in any hour; 0 turns them off
	// (stalls are still logged; SIGUSR1 still captures).
	MaxCaptures int
	Capturer    Capturer
	Logger      *slog.Logger // default slog.Default()
	// Events, when set, is told what happens (events.go): a stall began,
	// a capture ended, the target recovered or exited, and every
	// ReportEvery (default DefaultReportEvery) the heartbeat's age. It is
	// called from the watchdog's goroutine and must return quickly.
	Events      func(Event)
	ReportEvery time.Duration
	// AbandonHint says how the caller's user leaves a capture in
	// progress unfinished (Abandon; watch: "signal again to leave it"),
	// told only when the watchdog stops during a capture.
	AbandonHint string

	clock     clock         // tests inject a fake one
	lateAfter time.Duration // tests shorten it
	// grain rounds the detector's deadlines up to its multiples on
	// CLOCK_MONOTONIC (timerGrain); 0 (a fake clock's tests) fires at
	// the deadline itself.
	grain time.Duration
}

// timerGrain is how far a watchdog's deadline may be put off so that the
// deadlines of many targets fall on the same instants and cost one
// wake-up: a hundredth of stall-after, at most 100 ms. A stall is then
// declared at most that much later than stall-after after the last beat
// seen.
func timerGrain(stallAfter time.Duration) time.Duration {
	return min(stallAfter/100, 100*time.Millisecond)
}

// ErrTargetExited is returned by Run when the target exits. It is also the
// cause a capture in flight is cancelled with (model.ErrTargetExited).
var ErrTargetExited = model.ErrTargetExited

// shutdownGrace bounds the wait for a cut-short capture when the watchdog
// stops: writing it (symbolizing, rendering) takes seconds on a loaded
// machine, and SIGTERM must still end stallwatch well within the grace
// period of docker stop (10 s) and Kubernetes (30 s). Abandon ends the wait
// at once (a second SIGTERM). exitGrace bounds it when the target exited:
// nothing else is waiting then, and the capture of a target's last
// moments is worth its writing time.
const (
	shutdownGrace = 5 * time.Second
	exitGrace     = 2 * time.Minute
)

// Watchdog watches the heartbeats of one target and captures its stalls.
type Watchdog struct {
	cfg      Config
	log      *slog.Logger
	clk      clock
	signal   chan struct{}
	requests atomic.Int64 // CaptureNow calls not yet handed to the detector

	abandon     chan struct{} // closed by Abandon
	abandonOnce sync.Once
	pub         published // for Status
}

// Abandon makes a stopping watchdog leave the capture in progress
// unfinished instead of waiting for it to be written (a second SIGTERM).
func (w *Watchdog) Abandon() {
	w.abandonOnce.Do(func() { close(w.abandon) })
}

// New checks cfg and returns a watchdog ready to Run.
func New(cfg Config) (*Watchdog, error) {
	if len(cfg.Sources) == 0 {
		return nil, errors.New("watchdog: no heartbeat source")
	}
	if cfg.Capturer == nil {
		return nil, errors.New("watchdog: no capturer")
	}
	if cfg.StallAfter == 0 {
		cfg.StallAfter = 10 * time.Second
	}
	if cfg.RecaptureAfter == 0 {
		cfg.RecaptureAfter = 5 * time.Minute
	}
	if cfg.ReportEvery == 0 {
		cfg.ReportEvery = DefaultReportEvery
	}
	if cfg.StallAfter < 0 || cfg.RecaptureAfter < 0 || cfg.MaxCaptures < 0 || cfg.ReportEvery < 0 {
		return nil, fmt.Errorf("watchdog: negative stall-after %v, recapture-after %v or max-captures %d",
			cfg.StallAfter, cfg.RecaptureAfter, cfg.MaxCaptures)
	}
	w := &Watchdog{cfg: cfg, log: cfg.Logger, clk: cfg.clock, signal: make(chan struct{}, 1), abandon: make(chan struct{})}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.clk == nil {
		w.clk = realClock{}
		w.cfg.grain = timerGrain(cfg.StallAfter)
	}
	return w, nil
}

// CaptureNow asks for a capture with trigger "signal", whatever the state
// (SIGUSR1). It never blocks. Requests are merged: those that arrive
// together make one capture, those that arrive while a capture runs make
// at most one more after it, and each merge is logged once with how many
// requests it took.
func (w *Watchdog) CaptureNow() {
	w.requests.Add(1)
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// Run watches until ctx is done (it returns nil), the target exits
// (ErrTargetExited) or a source fails. A capture in progress when it stops
// is cut short and waited for.
func (w *Watchdog) Run(ctx context.Context) error {
	srcCtx, stopSources := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopSources()

	names := make([]string, len(w.cfg.Sources))
	for i, s := range w.cfg.Sources {
		names[i] = s.String()
	}
	box := newBeatBox(len(names), w.clk)
	w.pub.setBox(box)
	srcErr := make(chan error, len(names))
	for i, s := range w.cfg.Sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.Run(srcCtx, func() { box.put(i) })
			if err != nil && srcCtx.Err() == nil {
				srcErr <- fmt.Errorf("heartbeat %s: %w", s, err)
			}
		}()
	}
	exited, stopExit := watchExit(w.cfg.PID)
	defer stopExit()

	l := &loop{w: w, box: box, tick: make(chan uint64, 1), capDone: make(chan captureDone, 1)}
	l.d = newDetector(policy{
		StallAfter: w.cfg.StallAfter, RecaptureAfter: w.cfg.RecaptureAfter,
		MaxCaptures: w.cfg.MaxCaptures, LateAfter: w.cfg.lateAfter,
	}, names, w.log, w.clk.Now())
	if pid := w.cfg.PID; pid != 0 {
		l.d.alive = func() bool { return procfs.Alive(pid) }
	}
	defer l.disarm()
	var report <-chan time.Time
	var reportTimer *time.Timer
	if w.cfg.Events != nil {
		reportTimer = time.NewTimer(untilReport(w.cfg.ReportEvery))
		defer reportTimer.Stop()
		report = reportTimer.C
	}
	for {
		l.arm()
		l.publish()
		// A healthy target's beats need no one awake: the deadline's
		// timer takes them all when it fires. In any other state a beat
		// is news (the first one, the end of a stall).
		box.wakeOnBeat(l.d.phase != stateHealthy)
		select {
		case <-ctx.Done():
			l.shutdown("stallwatch is stopping")
			return nil
		case <-exited:
			l.targetExited()
			l.publish()
			return ErrTargetExited
		case err := <-srcErr:
			l.shutdown("a heartbeat source failed")
			return err
		case <-box.ready:
			if !l.apply(l.feedBeats()) {
				return ErrTargetExited
			}
		case gen := <-l.tick:
			if gen != l.gen {
				continue // a timer stopped too late to stay silent
			}
			l.stop = nil
			syncBoot(w.clk) // a suspend must be seen now, if ever
			if !l.apply(l.feedBeats()) || !l.apply(l.d.Tick(l.now)) {
				return ErrTargetExited
			}
		case <-w.signal:
			n := int(w.requests.Swap(0))
			if n == 0 {
				continue // counted by an earlier wake-up
			}
			if !l.apply(l.feedBeats()) || !l.apply(l.d.Signal(l.now, n)) {
				return ErrTargetExited
			}
		case r := <-l.capDone:
			l.cancel(nil) // release the capture's context
			l.cancel = nil
			if !l.apply(l.feedBeats()) {
				return ErrTargetExited
			}
			l.captureEnded(r)
			if !l.apply(l.d.CaptureDone(l.now, r.res, r.err)) {
				return ErrTargetExited
			}
		case <-report:
			reportTimer.Reset(untilReport(w.cfg.ReportEvery))
			if !l.apply(l.feedBeats()) {
				return ErrTargetExited
			}
			l.reportHeartbeat()
		}
	}
}

// untilReport is the time to the next multiple of every on
// CLOCK_MONOTONIC: every watchdog of a process reports at the same
// instants, so that a daemon's hundreds of targets wake up together
// rather than one after another.
func untilReport(every time.Duration) time.Duration {
	mono := monotime.Duration()
	return every - mono%every
}

type captureDone struct {
	tr  model.Trigger
	res *model.Result
	err error
}

// captureEnded tells Config.Events that a capture ended.
func (l *loop) captureEnded(r captureDone) {
	l.w.emit(Event{Kind: CaptureDone, Stall: stallOfTrigger(&r.tr), Trigger: &r.tr, Result: r.res, Err: r.err})
}

// reportHeartbeat tells Config.Events the heartbeat's age.
func (l *loop) reportHeartbeat() {
	now := l.w.clk.Now()
	ev := Event{Kind: Heartbeat, At: now.Wall, Stalled: l.d.inStall()}
	ev.Age, ev.Beaten = l.d.heartbeatAge(now)
	if s := l.d.stallInfo(now); s != nil {
		ev.Stall = *s
	}
	l.w.emit(ev)
}

// loop is the state of one Run: the detector, its timer and the capture
// in flight. Only Run's goroutine touches it.
type loop struct {
	w   *Watchdog
	d   *detector
	box *beatBox

	tick    chan uint64
	gen     uint64      // of the armed timer
	stop    func() bool // of the armed timer; nil when none
	armedAt instant

	capDone chan captureDone
	cancel  context.CancelCauseFunc // of the capture in flight
	now     instant                 // when the last beats were taken
}

// arm makes sure a timer fires at the detector's deadline. A timer armed
// for an earlier time is kept: when it fires the deadline is computed again.
func (l *loop) arm() {
	at, ok := l.d.Deadline(l.w.clk.Now())
	if !ok {
		l.disarm()
		return
	}
	if l.stop != nil && !at.Before(l.armedAt) {
		return
	}
	l.disarm()
	l.gen++
	gen := l.gen
	l.armedAt = at
	now := l.w.clk.Now()
	wait := max(at.Sub(now), 0)
	if g := l.w.cfg.grain; g > 0 {
		wait = (now.Mono+wait+g-1)/g*g - now.Mono
	}
	l.stop = l.w.clk.AfterFunc(wait, func() {
		select {
		case l.tick <- gen:
		default:
		}
	})
}

func (l *loop) disarm() {
	if l.stop != nil {
		l.stop()
		l.stop = nil
	}
}

// feedBeats gives the detector the beats that arrived, and sets l.now to
// the instant they were all taken at: an event handled next happened after
// every one of them. A beat can end a stall: the recovery is returned.
func (l *loop) feedBeats() action {
	var act action
	l.now = l.box.drain(func(i int, at instant) {
		if a := l.d.Beat(i, at); a.ended != nil {
			act = a
		}
	})
	return act
}

// apply carries out the detector's action. It returns false when the
// target turned out to have exited.
func (l *loop) apply(act action) bool {
	if act.ended != nil {
		l.w.emit(Event{Kind: Recovered, At: l.now.Wall, Stall: *act.ended, Captures: act.endedWith})
	}
	for _, res := range act.recovered {
		if err := l.w.cfg.Capturer.Recovered(res, act.stall); err != nil {
			l.w.log.Error("recording the recovery in a capture failed", "dir", res.Dir, "err", err)
		}
	}
	if act.exited {
		l.finishCapture(ErrTargetExited, exitGrace)
		l.exited()
		return false
	}
	if act.began != nil {
		l.w.emit(Event{Kind: StallBegan, At: l.now.Wall, Stall: *act.began})
	}
	if act.capture == nil {
		return true
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	l.cancel = cancel
	tr := *act.capture
	go func() {
		l.w.captureRunning(true)
		res, err := l.w.cfg.Capturer.Capture(ctx, tr)
		l.w.captureRunning(false)
		if res != nil {
			l.w.captured(res.Dir)
		}
		l.capDone <- captureDone{tr, res, err}
	}()
	return true
}

// exited tells Config.Events that the target exited.
func (l *loop) exited() {
	ev := Event{Kind: Exited}
	if l.d.exitStall != nil {
		ev.Stall = *l.d.exitStall
	}
	l.w.emit(ev)
}

// captureRunning tells the sources a capture's own effects could make beat.
func (w *Watchdog) captureRunning(on bool) {
	for _, s := range w.cfg.Sources {
		if ca, ok := s.(captureAware); ok {
			ca.captureRunning(on)
		}
	}
}

func (l *loop) targetExited() {
	l.d.Exit(l.w.clk.Now())
	l.finishCapture(ErrTargetExited, exitGrace)
	l.exited()
}

func (l *loop) shutdown(why string) {
	l.w.log.Info("watchdog stopping", "why", why, "state", l.d.State())
	if l.cancel != nil {
		msg := "stopping: the capture in progress is finished and written first"
		if h := l.w.cfg.AbandonHint; h != "" {
			msg += "; " + h
		}
		l.w.log.Info(msg, "within", shutdownGrace)
	}
	l.finishCapture(errors.New(why), shutdownGrace)
}

// finishCapture cuts the capture in flight short, with why as its
// context's cause, and waits for it to be written, at most grace.
func (l *loop) finishCapture(why error, grace time.Duration) {
	if l.cancel == nil {
		return
	}
	l.cancel(why)
	l.cancel = nil
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case r := <-l.capDone:
		l.captureEnded(r)
		l.d.CaptureDone(l.w.clk.Now(), r.res, r.err)
	case <-t.C:
		l.w.log.Error("the capture in progress did not finish in time; leaving it", "why", why, "waited", grace)
	case <-l.w.abandon:
		l.w.log.Warn("leaving the capture in progress unfinished, as asked", "why", why)
	}
}

// beatBox hands beats from the sources' goroutines to the loop without
// ever blocking a source: it keeps each source's latest beat. It wakes the
// loop only when the loop asked to be (wakeOnBeat): a healthy target's
// beats wait for the deadline, so that 200 targets beating every second
// cost no wake-ups of their loops.
//
// A beat drained by the loop stays visible to latest until the loop has
// published what it made of it (published), so that Status, which reads
// the published state and then the box under one lock, never misses a
// beat that is in neither.
type beatBox struct {
	clk     clock
	mu      sync.Mutex
	at      []instant
	pending []bool
	taken   []bool // drained, not yet published
	wake    bool
	ready   chan struct{}
}

func newBeatBox(n int, clk clock) *beatBox {
	return &beatBox{clk: clk, at: make([]instant, n), pending: make([]bool, n), taken: make([]bool, n),
		wake: true, ready: make(chan struct{}, 1)}
}

// put records a beat of source i now. The time is read under the lock so
// that drain's instant is after every beat it hands over.
func (b *beatBox) put(i int) {
	b.mu.Lock()
	b.at[i], b.pending[i] = b.clk.Now(), true
	wake := b.wake
	b.mu.Unlock()
	if wake {
		b.notify()
	}
}

func (b *beatBox) notify() {
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// wakeOnBeat says whether a beat must wake the loop. Beats that came
// while it did not are handed over at once when it starts to.
func (b *beatBox) wakeOnBeat(on bool) {
	b.mu.Lock()
	was := b.wake
	b.wake = on
	pending := on && !was && slices.Contains(b.pending, true)
	b.mu.Unlock()
	if pending {
		b.notify()
	}
}

// latest calls fn with each source's newest beat not yet published.
func (b *beatBox) latest(fn func(i int, at instant)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, p := range b.pending {
		if p || b.taken[i] {
			fn(i, b.at[i])
		}
	}
}

// published says that the beats drained so far are in the published
// state.
func (b *beatBox) published() {
	b.mu.Lock()
	clear(b.taken)
	b.mu.Unlock()
}

func (b *beatBox) drain(fn func(i int, at instant)) instant {
	b.mu.Lock()
	now := b.clk.Now()
	var got [8]struct {
		i  int
		at instant
	}
	beats := got[:0]
	for i, p := range b.pending {
		if p {
			beats = append(beats, struct {
				i  int
				at instant
			}{i, b.at[i]})
			b.pending[i], b.taken[i] = false, true
		}
	}
	b.mu.Unlock()
	for _, bt := range beats {
		fn(bt.i, bt.at)
	}
	return now
}
