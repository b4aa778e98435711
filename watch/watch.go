package watch

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/continuous"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/watchdog"
)

// ErrTargetExited is how a watch ends when its target exits, and what
// opening it gives for a target already gone, whatever found it gone.
var ErrTargetExited = model.ErrTargetExited

// DefaultSessionIdle is how long a capture session without a flight
// recorder stays open after a capture.
const DefaultSessionIdle = 5 * time.Minute

// Config is one target to watch.
type Config struct {
	// PID is the target; Start its start time (/proc/PID/stat's
	// starttime, clock ticks after boot) when the caller knows it, else
	// it is read now: a process with the pid and another start time is
	// not the target.
	PID   int
	Start uint64
	// Settings say how the target is watched.
	Settings Settings
	// Sources are heartbeats the caller made beforehand, beside those
	// of Settings.Heartbeat (watch's DogStatsD proxy, bound before its
	// child starts, so that the child is told its address).
	Sources []watchdog.Source
	// Poller reads the progress of every target of the caller's in the
	// same wake-ups; nil: one of this watch's own.
	Poller *watchdog.Poller
	// Taps are the caller's DogStatsD taps; nil: one set of this
	// watch's own, closed with it.
	Taps *Taps
	// Gate admits each capture; nil: every capture runs at once.
	Gate Gate
	// SessionIdle is how long a session without a flight recorder stays
	// open after a capture (default DefaultSessionIdle).
	SessionIdle time.Duration
	// Opening, when set, is called on the capture settings each time a
	// session opens, for what may change while the target is watched
	// (the daemon's keep, as the last reload set it).
	Opening func(*capture.Config)
	// Profiler cuts the periods of the target's continuous profile when
	// Settings.ProfilePeriod asks for one (nil: no profile); Process and
	// Tags are what they are tagged with (continuous.Target). Its owner
	// closes it after the watch.
	Profiler *continuous.Profiler
	Process  string
	Tags     []string
	// ProfileBegun, when set, is told each time the target's continuous
	// profile begins (when its session opens, and again after
	// DropProfile), with the directory of its periods.
	ProfileBegun func(dir string)
	// Events, Logger and AbandonHint are the watchdog's (watchdog.Config).
	Events      func(watchdog.Event)
	Logger      *slog.Logger
	AbandonHint string
}

// target is the process watched.
type target struct {
	pid   int
	start uint64
}

// Watch is one target watched: its heartbeats, its capture session and
// its watchdog.
type Watch struct {
	log        *slog.Logger
	wd         *watchdog.Watchdog
	sess       *sessions
	taps       *Taps
	ownTaps    bool
	pid        int
	heartbeats string
}

// New makes the target's heartbeats and its watchdog; nothing is
// watched, and no session opened, before Open and Run.
func New(cfg Config) (*Watch, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	t := target{pid: cfg.PID, start: cfg.Start}
	if t.start == 0 {
		if st, err := procfs.ReadStat(t.pid, t.pid); err == nil {
			t.start = st.StartTime
		}
	}
	w := &Watch{log: log, taps: cfg.Taps, pid: cfg.PID}
	if w.taps == nil {
		w.taps, w.ownTaps = NewTaps(log), true
	}
	poller := cfg.Poller
	if poller == nil {
		poller = watchdog.NewPoller()
	}
	s := &cfg.Settings
	own, err := sources(&s.Heartbeat, s.StallAfter, t, poller, w.taps, log)
	if err != nil {
		w.releaseTaps()
		return nil, err
	}
	srcs := append(append([]watchdog.Source{}, cfg.Sources...), own...)
	names := make([]string, len(srcs))
	for i, src := range srcs {
		names[i] = src.String()
	}
	w.heartbeats = strings.Join(names, ", ")

	ccfg := s.Capture
	ccfg.PID, ccfg.Snapshot, ccfg.Heartbeat, ccfg.Logger = cfg.PID, true, w.heartbeats, log
	idle := cfg.SessionIdle
	if idle <= 0 {
		idle = DefaultSessionIdle
	}
	w.sess = &sessions{cfg: ccfg, opening: cfg.Opening, gate: cfg.Gate, idle: idle, log: log}
	if cfg.Profiler != nil && s.ProfilePeriod > 0 {
		w.sess.prof = profile{
			profiler: cfg.Profiler,
			target:   continuous.Target{PID: cfg.PID, Process: cfg.Process, Tags: cfg.Tags, Period: s.ProfilePeriod},
			begun:    cfg.ProfileBegun,
		}
	}
	w.wd, err = watchdog.New(watchdog.Config{
		PID: cfg.PID, Sources: srcs, StallAfter: s.StallAfter, RecaptureAfter: s.RecaptureAfter,
		MaxCaptures: s.MaxCaptures, Capturer: w.sess, Logger: log, Events: cfg.Events, AbandonHint: cfg.AbandonHint,
	})
	if err != nil {
		w.releaseTaps()
		return nil, err
	}
	return w, nil
}

// Heartbeats names the target's heartbeats, as triggers and logs do.
func (w *Watch) Heartbeats() string { return w.heartbeats }

// Open opens the capture session now when it has a flight recorder or a
// continuous profile, which sample from then on (the profile begins); a
// session without either opens at the first capture. A target gone
// already is ErrTargetExited. The caller decides whether a failure ends
// the watch (watch: it does) or leaves the session to open at the first
// capture (the daemon).
func (w *Watch) Open() error {
	if !w.sess.keepOpen() {
		return nil
	}
	_, err := w.sess.session()
	return err
}

// Run watches until the target exits (ErrTargetExited) or ctx ends (nil);
// a capture in progress is cut short and written first.
func (w *Watch) Run(ctx context.Context) error { return w.wd.Run(ctx) }

// CaptureNow asks for a capture now (SIGUSR1, a control request).
func (w *Watch) CaptureNow() { w.wd.CaptureNow() }

// Abandon gives up a capture in progress without waiting for it to be
// written (a second signal).
func (w *Watch) Abandon() { w.wd.Abandon() }

// Status is the watchdog's state.
func (w *Watch) Status() watchdog.Status { return w.wd.Status() }

// Profiling reports whether the target is to be profiled continuously
// now: its settings ask for it, and DropProfile has not stopped it.
func (w *Watch) Profiling() bool {
	w.sess.mu.Lock()
	defer w.sess.mu.Unlock()
	return w.sess.profilesLocked()
}

// DropProfile stops the target's continuous profile until ProfileAt,
// its last period marked key:value (note) — the daemon's budget, which
// no longer profiles it. It returns at once: the profile stops, and the
// session closes when idle unless a flight recorder keeps it, on a
// goroutine of their own.
func (w *Watch) DropProfile(key, value, note string) { w.sess.dropProfile(key, value, note) }

// ProfileAt sets the rate of the target's continuous profile (freq 0: as
// its settings say; offCPU: off-CPU samples too) and marks its periods
// from now on key:value (note; key "": no mark). A profile DropProfile
// stopped begins again. It does nothing slow: a session to open is
// opened on a goroutine of its own.
func (w *Watch) ProfileAt(freq int, offCPU bool, key, value, note string) {
	w.sess.profileAt(freq, offCPU, key, value, note)
}

// Close releases what the watch holds once Run returned: the capture
// in progress is waited for (at most a minute), then the continuous
// profile's last period is cut, and the session and the target's tap
// heartbeat are closed.
func (w *Watch) Close() {
	w.sess.close()
	w.releaseTaps()
}

func (w *Watch) releaseTaps() {
	w.taps.release(w.pid)
	if w.ownTaps {
		w.taps.Close()
	}
}
