package capture

import "time"

// TriggerKind is why a capture was taken; it names the capture directory.
type TriggerKind string

const (
	Stall  TriggerKind = "stall"  // the heartbeat stopped
	Signal TriggerKind = "signal" // SIGUSR1
	Manual TriggerKind = "manual" // `stallwatch record`
)

// Trigger describes the moment a capture was asked for.
type Trigger struct {
	Kind TriggerKind
	// At is when the capture was triggered; Mono is the same instant on
	// CLOCK_MONOTONIC.
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

// Result is what a finished capture left on disk.
type Result struct {
	Dir     string // the capture directory
	Trigger Trigger
	Start   time.Time // first sample's time window start (history included)
	End     time.Time
	// CutShort is set when the capture ended early (signal, target exit);
	// Why says why.
	CutShort bool
	Why      string

	Samples      int // on-CPU samples
	OffCPU       int // off-CPU intervals
	Lost         uint64
	Threads      int
	TargetExited bool
}
