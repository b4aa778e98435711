package watchdog

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/model"
)

// State is where the detector stands. Each change is one log line.
type state int

const (
	stateWaiting   state = iota // no heartbeat seen yet: nothing can stall
	stateHealthy                // every source beat within stall-after
	stateStalled                // a source is silent; no capture running (rate limit)
	stateCapturing              // a capture is running
	stateCooldown               // the stall goes on; waiting for a recapture
	stateRecovered              // beats resumed; the last capture is finishing
	stateExited                 // the target exited
)

var stateNames = [...]string{"waiting", "healthy", "stalled", "capturing", "cooldown", "recovered", "exited"}

func (s state) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return fmt.Sprintf("state(%d)", int(s))
	}
	return stateNames[s]
}

// LogValue names the state in every log format (JSON too).
func (s state) LogValue() slog.Value { return slog.StringValue(s.String()) }

var stateMessages = [...]string{
	stateWaiting:   "waiting for the first heartbeat",
	stateHealthy:   "heartbeat healthy",
	stateStalled:   "heartbeat stalled",
	stateCapturing: "capture started",
	stateCooldown:  "capture done; the stall goes on",
	stateRecovered: "heartbeat recovered",
	stateExited:    "target exited",
}

// policy is the detector's configuration.
type policy struct {
	StallAfter     time.Duration
	RecaptureAfter time.Duration
	MaxCaptures    int // stall captures in any hour; 0 turns them off
	// LateAfter is how late the watchdog's own wake-up (or how long a host
	// suspend) may be before the silence it measured is no longer trusted.
	LateAfter time.Duration
}

// captureWindow is the period --max-captures counts over.
const captureWindow = time.Hour

// defaultLateAfter lets a wake-up be late by a quarter of stall-after, and
// never less than a second: a shared machine delays timers by tens of
// milliseconds routinely, and re-arming costs a whole stall-after.
func defaultLateAfter(stallAfter time.Duration) time.Duration {
	return max(stallAfter/4, time.Second)
}

// action is what the detector asks its owner to do after an event.
type action struct {
	capture *model.Trigger // start this capture
	// recovered lists the captures of a stall that ended, with its length.
	recovered []*model.Result
	stall     time.Duration
	exited    bool // the silence was the target exiting
	// began and ended are news for Config.Events: a stall began (at the
	// trigger), a stall ended (at the beat that ended it, with the
	// captures written by then).
	began     *StallInfo
	ended     *StallInfo
	endedWith []*model.Result
}

// detector is the stall state machine. It does no I/O and reads no clock:
// every event carries the instant it happened, so tests drive it with
// made-up times. It is not safe for concurrent use.
type detector struct {
	p     policy
	log   *slog.Logger
	names []string // heartbeat source names, by index
	// alive double-checks the target before a silence is blamed on it;
	// nil: assume it is.
	alive func() bool

	last  []instant // each source's last beat
	seen  []bool
	start instant

	phase     state // any state but stateCapturing, which is shown while a capture runs
	shown     state // the state last logged
	shownAt   instant
	inflight  *model.Trigger
	forStall  bool // the capture in flight belongs to the current stall
	signalDue int  // capture requests (SIGUSR1) that arrived during a capture

	// The current stall.
	stallStart   instant  // last beat of the longest-silent source
	silentNames  []string // the sources that went silent
	stallSeq     int      // stall captures taken of it
	stallResults []*model.Result
	stallLen     time.Duration // set on recovery
	exitStall    *StallInfo    // the stall the target exited in
	lastCapture  instant
	limitLogged  bool

	history  []time.Duration // monotonic starts of stall captures, last hour (a failed one is taken out)
	deadline instant         // when the detector asked to be ticked
	hasDL    bool
	offset   time.Duration // CLOCK_BOOTTIME − CLOCK_MONOTONIC at the last event
	warned   bool          // "no heartbeat yet" was logged
}

func newDetector(p policy, names []string, log *slog.Logger, now instant) *detector {
	if p.LateAfter <= 0 {
		p.LateAfter = defaultLateAfter(p.StallAfter)
	}
	d := &detector{
		p: p, log: log, names: names,
		last: make([]instant, len(names)), seen: make([]bool, len(names)),
		start: now, phase: stateWaiting, shown: stateWaiting, shownAt: now,
		offset: now.suspendOffset(),
	}
	log.Info(stateMessages[stateWaiting], "state", stateWaiting, "sources", strings.Join(names, ", "), "stall_after", p.StallAfter)
	return d
}

// State is the state as last logged.
func (d *detector) State() state { return d.shown }

// Beat records a heartbeat of source i.
func (d *detector) Beat(i int, now instant) action {
	d.offset = now.suspendOffset()
	if d.phase == stateExited {
		return action{}
	}
	d.last[i], d.seen[i] = now, true
	switch d.phase {
	case stateWaiting:
		d.phase = stateHealthy
		d.show(now, "source", d.names[i])
	case stateStalled, stateCooldown:
		if len(d.silent(now)) == 0 {
			return d.recover(now)
		}
	}
	return action{}
}

// Tick is called when the deadline the detector asked for has come.
func (d *detector) Tick(now instant) action {
	if d.phase == stateExited {
		return action{}
	}
	if d.phase == stateHealthy && d.wokeLate(now) {
		return action{}
	}
	d.offset = now.suspendOffset()
	switch d.phase {
	case stateWaiting:
		if !d.warned && now.Sub(d.start) >= d.p.StallAfter {
			d.warned = true
			d.log.Warn("no heartbeat seen yet", "state", stateWaiting, "after", round(now.Sub(d.start)), "sources", strings.Join(d.names, ", "))
		}
	case stateHealthy:
		if silent := d.silent(now); len(silent) > 0 {
			if d.alive != nil && !d.alive() {
				d.Exit(now)
				return action{exited: true}
			}
			d.enterStall(now, silent)
			act := d.tryCapture(now)
			if !act.exited {
				act.began = d.stallInfo(now)
				if act.capture != nil {
					act.began.Reason = act.capture.Reason
				} else {
					act.began.Reason = fmt.Sprintf("no heartbeat from %s for %v (stall-after %v)", act.began.Source, round(act.began.For), d.p.StallAfter)
				}
			}
			return act
		}
	case stateStalled:
		return d.tryCapture(now)
	case stateCooldown:
		if now.Sub(d.lastCapture) >= d.p.RecaptureAfter {
			return d.tryCapture(now)
		}
	}
	return action{}
}

// wokeLate reports, and logs, a wake-up that came too late for the silence
// it ends to be blamed on the target: the host was suspended or the
// watchdog itself was not scheduled. Every source is then re-armed, as if it
// had just beaten, so a real stall is still caught one stall-after later.
func (d *detector) wokeLate(now instant) bool {
	suspended := now.suspendOffset() - d.offset
	late := time.Duration(0)
	if d.hasDL {
		late = now.Sub(d.deadline)
	}
	if suspended < d.p.LateAfter && late < d.p.LateAfter {
		return false
	}
	d.offset = now.suspendOffset()
	for i := range d.last {
		if d.seen[i] {
			d.last[i] = now
		}
	}
	why := "the watchdog was not scheduled on time"
	if suspended >= d.p.LateAfter {
		why = "the host was suspended"
	}
	d.log.Warn("watchdog woke up late; re-arming instead of reporting a stall",
		"state", d.shown, "why", why, "late", round(late), "suspended", round(suspended))
	return true
}

// silent lists the sources that have beaten once and not within stall-after.
func (d *detector) silent(now instant) []int {
	var s []int
	for i := range d.last {
		if d.seen[i] && now.Sub(d.last[i]) >= d.p.StallAfter {
			s = append(s, i)
		}
	}
	return s
}

func (d *detector) enterStall(now instant, silent []int) {
	d.stallStart = d.last[silent[0]]
	d.silentNames = d.silentNames[:0]
	for _, i := range silent {
		if d.last[i].Before(d.stallStart) {
			d.stallStart = d.last[i]
		}
		d.silentNames = append(d.silentNames, d.names[i])
	}
	d.stallSeq, d.stallResults, d.limitLogged = 0, nil, false
	d.phase = stateStalled
	attrs := []any{"source", strings.Join(d.silentNames, ", "), "silent_for", round(now.Sub(d.stallStart)),
		"last_beat", d.stallStart.Wall}
	if d.inflight != nil {
		// A signal's capture is running: the state shown stays
		// "capturing", but the stall is news.
		d.log.Info(stateMessages[stateStalled], append([]any{"state", d.shown}, attrs...)...)
		return
	}
	d.show(now, attrs...)
}

// tryCapture starts a stall capture unless one is running or the hourly
// limit is reached.
func (d *detector) tryCapture(now instant) action {
	if d.inflight != nil {
		return action{}
	}
	if d.alive != nil && !d.alive() {
		d.Exit(now)
		return action{exited: true}
	}
	d.pruneHistory(now)
	if d.p.MaxCaptures <= 0 || len(d.history) >= d.p.MaxCaptures {
		d.phase = stateStalled
		d.show(now)
		if !d.limitLogged {
			d.limitLogged = true
			if d.p.MaxCaptures <= 0 {
				d.log.Info("stall captures are off (--max-captures 0)", "state", d.shown)
			} else {
				d.log.Warn("capture skipped: --max-captures reached", "state", d.shown,
					"max_captures", d.p.MaxCaptures, "next_allowed_in", round(d.history[0]+captureWindow-now.Mono))
			}
		}
		return action{}
	}
	d.history = append(d.history, now.Mono)
	d.stallSeq++
	d.limitLogged = false
	tr := d.trigger(now, model.Stall)
	tr.Seq = d.stallSeq
	return d.startCapture(now, tr, true)
}

func (d *detector) pruneHistory(now instant) {
	n := 0
	for n < len(d.history) && now.Mono-d.history[n] >= captureWindow {
		n++
	}
	d.history = d.history[n:]
}

func (d *detector) inStall() bool { return d.phase == stateStalled || d.phase == stateCooldown }

func (d *detector) trigger(now instant, kind model.TriggerKind) model.Trigger {
	tr := model.Trigger{Kind: kind, At: now.Wall, Mono: uint64(now.Mono)}
	if d.inStall() {
		tr.LastBeat = d.stallStart.Wall
		tr.StallFor = now.Sub(d.stallStart)
		tr.Source = strings.Join(d.silentNames, ", ")
	} else if i := d.latestBeat(); i >= 0 {
		tr.LastBeat = d.last[i].Wall
		tr.Source = d.names[i]
	}
	switch kind {
	case model.Signal:
		tr.Reason = "capture asked for by SIGUSR1"
		if d.inStall() {
			tr.Reason += fmt.Sprintf(" during a stall: no heartbeat from %s for %v", tr.Source, round(tr.StallFor))
		}
	default:
		tr.Reason = fmt.Sprintf("no heartbeat from %s for %v (stall-after %v)", tr.Source, round(tr.StallFor), d.p.StallAfter)
	}
	return tr
}

func (d *detector) latestBeat() int {
	best := -1
	for i := range d.last {
		if d.seen[i] && (best < 0 || d.last[best].Before(d.last[i])) {
			best = i
		}
	}
	return best
}

func (d *detector) startCapture(now instant, tr model.Trigger, forStall bool) action {
	d.inflight, d.forStall = &tr, forStall
	d.lastCapture = now
	d.show(now, "trigger", tr.Kind, "seq", tr.Seq, "reason", tr.Reason)
	return action{capture: &tr}
}

// Signal handles n requests for a capture (SIGUSR1) that arrived
// together: one capture now, whatever the state. Requests that arrive
// during a capture are counted and make one capture when it ends.
func (d *detector) Signal(now instant, n int) action {
	if d.phase == stateExited || n <= 0 {
		return action{}
	}
	if d.inflight != nil {
		d.signalDue += n
		return action{}
	}
	return d.startCapture(now, d.signalTrigger(now, n), d.inStall())
}

// signalTrigger is the trigger of a capture asked for by n requests.
func (d *detector) signalTrigger(now instant, n int) model.Trigger {
	tr := d.trigger(now, model.Signal)
	if n > 1 {
		tr.Reason += fmt.Sprintf(" (%d requests, merged into this capture)", n)
	}
	return tr
}

// CaptureDone records the end of the capture in flight (res may be nil
// when it failed).
func (d *detector) CaptureDone(now instant, res *model.Result, err error) action {
	tr := d.inflight
	d.inflight = nil
	if err != nil {
		d.log.Error("capture failed", "state", d.shown, "trigger", kindOf(tr), "err", err)
	}
	if res == nil && tr != nil && tr.Kind == model.Stall && len(d.history) > 0 {
		// Nothing was written: max-captures counts captures, not tries.
		d.history = d.history[:len(d.history)-1]
	}
	if res != nil {
		attrs := []any{"state", d.shown, "dir", res.Dir, "trigger", kindOf(tr),
			"took", round(now.Sub(d.lastCapture)), "cut_short", res.Info.CutShort}
		if res.Info.CutShort {
			attrs = append(attrs, "why", res.Info.CutShortWhy)
		}
		d.log.Info("capture written", attrs...)
		if d.forStall {
			d.stallResults = append(d.stallResults, res)
		}
	}
	var act action
	switch d.phase {
	case stateRecovered:
		act = action{recovered: d.stallResults, stall: d.stallLen}
		d.stallResults = nil
		d.phase = stateHealthy
	case stateStalled, stateCooldown:
		if d.stallSeq == 0 {
			// The stall began during a signal's capture: capture it now.
			return d.tryCapture(now)
		}
		d.phase = stateCooldown
	case stateExited:
		return action{}
	}
	d.show(now)
	if n := d.signalDue; n > 0 {
		d.signalDue = 0
		d.log.Info("capture requests arrived during the capture: one capture follows for them", "state", d.shown, "requests", n)
		sig := d.startCapture(now, d.signalTrigger(now, n), d.inStall())
		sig.recovered, sig.stall = act.recovered, act.stall
		return sig
	}
	return act
}

func kindOf(tr *model.Trigger) model.TriggerKind {
	if tr == nil {
		return ""
	}
	return tr.Kind
}

// recover ends the stall at a beat.
func (d *detector) recover(now instant) action {
	d.stallLen = now.Sub(d.stallStart)
	d.phase = stateRecovered
	d.show(now, "stall", round(d.stallLen), "source", strings.Join(d.silentNames, ", "), "captures", d.stallSeq)
	ended := &StallInfo{Start: d.stallStart.Wall, For: d.stallLen, Source: strings.Join(d.silentNames, ", ")}
	with := append([]*model.Result(nil), d.stallResults...)
	if d.inflight != nil && d.forStall {
		// The captures' Results are updated when the one running ends.
		return action{ended: ended, endedWith: with}
	}
	act := action{recovered: d.stallResults, stall: d.stallLen, ended: ended, endedWith: with}
	d.stallResults = nil
	d.phase = stateHealthy
	d.show(now)
	return act
}

// Exit records that the target exited.
func (d *detector) Exit(now instant) {
	if d.phase == stateExited {
		return
	}
	attrs := []any{"was", d.shown}
	d.exitStall = d.stallInfo(now)
	if d.inStall() || d.phase == stateRecovered {
		attrs = append(attrs, "silent_for", round(now.Sub(d.stallStart)))
	}
	d.phase = stateExited
	d.show(now, attrs...)
}

// Deadline is when the detector wants its next Tick, asked at now; ok is
// false when only an event (a beat, a capture's end, a signal) can change
// anything. A deadline already past is due now: a Tick is late only by
// the time since it was asked for.
func (d *detector) Deadline(now instant) (at instant, ok bool) {
	at, ok = d.nextDeadline()
	d.deadline, d.hasDL = at, ok
	if ok && at.Before(now) {
		d.deadline = now
	}
	return at, ok
}

func (d *detector) nextDeadline() (instant, bool) {
	if d.phase == stateExited || (d.inflight != nil && d.phase != stateHealthy && d.phase != stateWaiting) {
		return instant{}, false
	}
	switch d.phase {
	case stateWaiting:
		return d.start.Add(d.p.StallAfter), !d.warned
	case stateHealthy:
		i := d.oldestBeat()
		return d.last[i].Add(d.p.StallAfter), true
	case stateStalled:
		if d.p.MaxCaptures <= 0 || len(d.history) == 0 {
			return instant{}, false
		}
		return d.start.Add(d.history[0] + captureWindow - d.start.Mono), true
	case stateCooldown:
		at := d.lastCapture.Add(d.p.RecaptureAfter)
		if d.p.MaxCaptures > 0 && len(d.history) >= d.p.MaxCaptures {
			if free := d.start.Add(d.history[0] + captureWindow - d.start.Mono); at.Before(free) {
				at = free
			}
		}
		return at, true
	}
	return instant{}, false
}

func (d *detector) oldestBeat() int {
	best := -1
	for i := range d.last {
		if d.seen[i] && (best < 0 || d.last[i].Before(d.last[best])) {
			best = i
		}
	}
	return best
}

// show logs a change of the displayed state, with how long the previous
// one lasted.
func (d *detector) show(now instant, attrs ...any) {
	st := d.phase
	if d.inflight != nil && st != stateRecovered && st != stateExited {
		st = stateCapturing
	}
	if st == d.shown {
		return
	}
	base := []any{"state", st, "from", d.shown, "after", round(now.Sub(d.shownAt))}
	d.shown, d.shownAt = st, now
	d.log.Info(stateMessages[st], append(base, attrs...)...)
}

// round keeps durations readable in logs.
func round(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
