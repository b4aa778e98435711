package watchdog

import (
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/model"
)

// EventKind is what happened to a watched target.
type EventKind int

const (
	// StallBegan: a heartbeat went silent for stall-after. Sent at the
	// trigger, before any capture starts.
	StallBegan EventKind = iota + 1
	// CaptureDone: a capture ended, written (Result) or failed (Err).
	CaptureDone
	// Recovered: beats resumed; Stall.For is the stall's whole length.
	Recovered
	// Exited: the target exited (during a stall when Stall.Start is set).
	Exited
	// Heartbeat: the periodic report, every Config.ReportEvery.
	Heartbeat
)

var kindNames = [...]string{StallBegan: "stall", CaptureDone: "capture", Recovered: "recovered", Exited: "exited", Heartbeat: "heartbeat"}

func (k EventKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "event?"
}

// StallInfo describes a stall as far as it is known.
type StallInfo struct {
	Start  time.Time     // the last beat before the silence
	For    time.Duration // the silence so far; at Recovered, the whole stall
	Source string        // the silent heartbeat(s)
	Reason string
}

// Event is one thing the watchdog saw, for what acts on it: alerts,
// hooks, uploads. Events of one watchdog come in order, from its own
// goroutine.
type Event struct {
	Kind EventKind
	At   time.Time
	PID  int
	// Stall is the stall the event belongs to; its Start is zero when
	// there is none (a capture on demand while healthy, a heartbeat
	// report while healthy).
	Stall StallInfo
	// Trigger, Result and Err are set at CaptureDone (Result nil when the
	// capture failed).
	Trigger *model.Trigger
	Result  *model.Result
	Err     error
	// Captures are the stall's captures written so far (Recovered).
	Captures []*model.Result
	// Age is the silence of the most silent heartbeat (Heartbeat); Beaten
	// is false before the first beat, when there is no age yet.
	Age     time.Duration
	Beaten  bool
	Stalled bool
}

// DefaultReportEvery is the period of Heartbeat events.
const DefaultReportEvery = 10 * time.Second

// emit hands an event to Config.Events.
func (w *Watchdog) emit(ev Event) {
	if w.cfg.Events == nil {
		return
	}
	ev.PID = w.cfg.PID
	if ev.At.IsZero() {
		ev.At = time.Now()
	}
	w.cfg.Events(ev)
}

// stallInfo is the current stall at now, or nil.
func (d *detector) stallInfo(now instant) *StallInfo {
	if !d.inStall() {
		return nil
	}
	return &StallInfo{Start: d.stallStart.Wall, For: now.Sub(d.stallStart), Source: strings.Join(d.silentNames, ", ")}
}

// heartbeatAge is the silence of the most silent source that has beaten.
func (d *detector) heartbeatAge(now instant) (time.Duration, bool) {
	i := d.oldestBeat()
	if i < 0 {
		return 0, false
	}
	return now.Sub(d.last[i]), true
}

// stallOfTrigger is the stall a capture's trigger belongs to.
func stallOfTrigger(tr *model.Trigger) StallInfo {
	if tr == nil || tr.StallFor <= 0 {
		return StallInfo{}
	}
	return StallInfo{Start: tr.LastBeat, For: tr.StallFor, Source: tr.Source, Reason: tr.Reason}
}
