package watch

import (
	"time"

	"github.com/stallwatch/stallwatch/capture"
)

// Heartbeat is what a target gives off, as `watch`'s flags and a daemon
// rule's settings of the same names say it. In paths and URLs, {pid} is
// the target's pid and {root} its root directory as stallwatch sees it
// (/proc/PID/root: a container's files).
type Heartbeat struct {
	Files        []string
	HTTP         string
	HTTPTimeout  time.Duration
	HTTPInterval time.Duration
	Proc         bool
	// Tap is the DogStatsD address whose datagrams are read from a packet
	// socket ("udp://:8125"); Metric and MetricTags select the heartbeat
	// among them (and among the DogStatsD proxy's, which the caller
	// makes: it is bound before a child is started, to be told its
	// address).
	Tap        string
	Metric     string
	MetricTags []string
}

// Empty reports whether no heartbeat is given.
func (h *Heartbeat) Empty() bool {
	return len(h.Files) == 0 && h.HTTP == "" && !h.Proc && h.Tap == ""
}

// Settings are how a target is watched: its heartbeats, when a stall is
// captured, and how.
type Settings struct {
	Heartbeat      Heartbeat
	StallAfter     time.Duration
	RecaptureAfter time.Duration
	MaxCaptures    int
	// Capture is the capture settings; PID, Snapshot, Heartbeat and
	// Logger are filled for each target.
	Capture capture.Config
	// ProfilePeriod, when not zero, profiles the target continuously
	// (Config.Profiler), a profile every ProfilePeriod; Capture.Profile
	// is set with it.
	ProfilePeriod time.Duration
}
