package model

import (
	"errors"
	"time"
)

// ErrTargetExited is why a capture was cut short when its target exited,
// whoever saw it first: the watchdog cancels a capture with it as the
// context's cause, and the capturer then records target_exited, as it
// does when it sees the exit itself.
var ErrTargetExited = errors.New("the target exited")

// TriggerKind is why a capture was taken; it names the capture directory.
type TriggerKind string

const (
	Stall  TriggerKind = "stall"  // the heartbeat stopped
	Signal TriggerKind = "signal" // SIGUSR1, or a control command
	Manual TriggerKind = "manual" // `stallwatch record`, `stallwatch snapshot --out`
	// Continuous is no trigger: a continuous profile's periods, read back
	// merged (`stallwatch report OUT/profiles/PID-PROCESS`).
	Continuous TriggerKind = "continuous"
)

// Trigger describes the moment a capture was asked for: what the watchdog
// hands a capturer.
type Trigger struct {
	Kind TriggerKind
	// At is when the capture was triggered; Mono is the same instant on
	// CLOCK_MONOTONIC (0: the capturer reads the clocks itself).
	At   time.Time
	Mono uint64
	// LastBeat is the last heartbeat seen (zero if none); StallFor is how
	// long the heartbeat had been silent at At.
	LastBeat time.Time
	StallFor time.Duration
	// Source names the heartbeat ("file /run/app.beat"); Reason is a
	// sentence for the report ("no heartbeat for 10.2s").
	Source string
	Reason string
	// Seq counts captures of the same stall (1 for the first, 2 for a
	// recapture of a stall that lasts).
	Seq int
}

// Result is what a finished capture left on disk: what the watchdog
// logs, and what alerts and hooks send on, without reading the directory
// again.
type Result struct {
	// Dir is the capture directory's path.
	Dir     string
	Trigger Trigger
	// Info is its capture.json as written: window, counts, findings
	// (most severe first), cut short or not.
	Info Info
}

// TopFinding is the capture's most severe finding; ok is false when it
// has none.
func (r *Result) TopFinding() (f Finding, ok bool) {
	if r == nil || len(r.Info.Findings) == 0 {
		return Finding{}, false
	}
	return r.Info.Findings[0], true
}
