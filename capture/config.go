package capture

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Config says how to capture one target. The zero value of an optional
// field means its default (the Default constants below).
type Config struct {
	PID int
	// Out is the directory capture directories are written under.
	Out string
	// Freq is the on-CPU sampling rate of a capture, per thread (997).
	Freq int
	// BaselineFreq is the rate of the flight recorder between captures
	// (49); 0 turns the flight recorder off: nothing samples the target
	// until a capture starts.
	BaselineFreq int
	// CaptureFor is how long a capture samples at Freq (10s).
	CaptureFor time.Duration
	// History is how much of the flight recorder goes into a capture as
	// phase=before (30s).
	History time.Duration
	// OffCPU, Kernel and Ptrace turn on off-CPU sampling, kernel frames,
	// and ptrace stops for the snapshot's user stacks. Commands set them
	// from --no-offcpu, --no-kernel and --no-ptrace.
	OffCPU, Kernel, Ptrace bool
	// Snapshot takes a thread snapshot with each capture (the watchdog
	// always does; `record` does not).
	Snapshot bool
	// ParentReapsAfterExit: the caller started the target and waits for
	// it only after it exited (see snapshot.Options).
	ParentReapsAfterExit bool
	// Keep is how many capture directories to keep under Out (0: all).
	Keep int
	// Heartbeat names what is watched, for the report ("file /run/app.beat").
	Heartbeat string
	Logger    *slog.Logger
}

// Defaults, as the README and every command's --help state them.
const (
	DefaultFreq         = 997
	DefaultBaselineFreq = 49
	DefaultCaptureFor   = 10 * time.Second
	DefaultHistory      = 30 * time.Second
	DefaultOut          = "./stallwatch-captures"
)

func (c *Config) fill() error {
	if c.PID <= 0 {
		return errors.New("capture: no target pid")
	}
	if c.Freq < 0 || c.BaselineFreq < 0 {
		return fmt.Errorf("capture: negative sampling rate (%d, %d)", c.Freq, c.BaselineFreq)
	}
	if c.Freq == 0 {
		c.Freq = DefaultFreq
	}
	if c.CaptureFor <= 0 {
		c.CaptureFor = DefaultCaptureFor
	}
	if c.History <= 0 {
		c.History = DefaultHistory
	}
	if c.Out == "" {
		c.Out = DefaultOut
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}
