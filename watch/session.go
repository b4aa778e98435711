package watch

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/continuous"
	"github.com/stallwatch/stallwatch/model"
)

// Gate admits each capture of a watched target: the daemon's host-wide
// limits (a slot among its concurrent captures, its hourly budget).
// Admit waits until the capture may run, or ctx ends; done is called
// once the capture is over, with what it gave.
type Gate interface {
	Admit(ctx context.Context, tr model.Trigger) (done func(*model.Result, error), err error)
}

// errNotWatched is a capture asked of a target no longer watched.
var errNotWatched = errors.New("the target is no longer watched")

// sessions holds a target's capture session and implements the
// watchdog's Capturer over it. The policy, one for every caller: a
// session that samples between captures — a flight recorder, a
// continuous profile — opens when the watch starts and stays open; one
// that does not opens at the first capture and closes after idle
// without one, so that a process watching hundreds of idle targets holds
// none of their symbol tables.
type sessions struct {
	cfg     capture.Config
	opening func(*capture.Config)
	gate    Gate
	idle    time.Duration
	log     *slog.Logger
	prof    profile

	mu       sync.Mutex
	sess     *capture.Session
	timer    *time.Timer
	closed   bool
	inflight int           // captures running
	settled  chan struct{} // closed when inflight drops to 0

	// The continuous profile of sess, if any (prof.profiler set):
	// beginning while Add runs; dropped while the caller stopped it
	// (DropProfile); rate and offCPU what the caller lets it sample at
	// (ProfileAt; rate 0: as the settings say).
	pt        *continuous.Profiled
	beginning bool
	dropped   bool
	rate      int
	offCPU    bool
}

// profile is what a target's continuous profile is: the profiler that
// cuts its periods (nil: none), what they are tagged with and how long
// each is, and whom to tell when it begins.
type profile struct {
	profiler *continuous.Profiler
	target   continuous.Target
	begun    func(dir string)
}

// profilesLocked reports whether the session is to have a continuous
// profile now (s.mu held).
func (s *sessions) profilesLocked() bool {
	return s.prof.profiler != nil && s.prof.target.Period > 0 && !s.dropped
}

// keepOpenLocked reports whether the session lives as long as the
// watch: it has a flight recorder or a continuous profile to run (s.mu
// held).
func (s *sessions) keepOpenLocked() bool {
	return !s.cfg.NoFlightRecorder && s.cfg.BaselineFreq != 0 || s.profilesLocked()
}

func (s *sessions) keepOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keepOpenLocked()
}

// session returns the open capture session, opening it if need be, and
// begins its continuous profile when it is to have one.
func (s *sessions) session() (*capture.Session, error) {
	s.mu.Lock()
	sess, err := s.openLocked()
	begin := err == nil && s.profilesLocked() && s.pt == nil && !s.beginning
	if begin {
		s.beginning = true
	}
	s.mu.Unlock()
	if begin {
		s.beginProfile(sess)
	}
	return sess, err
}

func (s *sessions) openLocked() (*capture.Session, error) {
	if s.closed {
		return nil, errNotWatched
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if s.sess != nil {
		return s.sess, nil
	}
	cfg := s.cfg
	if s.opening != nil {
		s.opening(&cfg)
	}
	sess, err := capture.Open(cfg)
	if err != nil {
		return nil, err
	}
	s.sess = sess
	// Reading the target's symbols left garbage behind; a watch that may
	// idle for days should not keep its pages.
	debug.FreeOSMemory()
	return sess, nil
}

// beginProfile begins the continuous profile of sess, at the rate the
// caller lets it sample at now.
func (s *sessions) beginProfile(sess *capture.Session) {
	s.mu.Lock()
	rate, offCPU := s.rate, s.offCPU
	s.mu.Unlock()
	if rate > 0 {
		if err := sess.SetProfileRate(rate, offCPU); err != nil {
			s.log.Warn("setting the continuous profile's rate", "err", err)
		}
	}
	t := s.prof.target
	t.Source = sess
	pt := s.prof.profiler.Add(t)
	sess.ProfiledIn(pt.Dir(), t.Period, s.cfg.Uploads != nil)
	s.mu.Lock()
	s.beginning = false
	gone := s.closed || s.dropped || s.sess != sess
	if !gone {
		s.pt = pt
	}
	s.mu.Unlock()
	if gone {
		pt.Stop()
		return
	}
	if s.prof.begun != nil {
		s.prof.begun(pt.Dir())
	}
}

// dropProfile stops the continuous profile until resumeProfile; its
// last period is marked key:value (note) first. It returns at once: the
// profile stops on a goroutine of its own, then the session, unless a
// flight recorder keeps it, closes when idle.
func (s *sessions) dropProfile(key, value, note string) {
	s.mu.Lock()
	if s.prof.profiler == nil {
		s.mu.Unlock()
		return
	}
	s.dropped = true
	pt, sess := s.pt, s.sess
	s.pt = nil
	s.mu.Unlock()
	if pt == nil {
		return
	}
	pt.Mark(key, value, note)
	go func() {
		pt.Stop()
		if sess != nil {
			_ = sess.SetProfileRate(0, false)
		}
		s.done()
	}()
}

// profileAt sets the continuous profile's rate and marks its periods
// from now on key:value (note; key "": no mark); a profile dropped
// begins again (on a goroutine of its own: the session may have to
// open).
func (s *sessions) profileAt(freq int, offCPU bool, key, value, note string) {
	s.mu.Lock()
	if s.prof.profiler == nil {
		s.mu.Unlock()
		return
	}
	was := s.dropped
	s.dropped, s.rate, s.offCPU = false, freq, offCPU
	sess, pt := s.sess, s.pt
	s.mu.Unlock()
	switch {
	case was:
		go func() {
			if _, err := s.session(); err != nil && !errors.Is(err, errNotWatched) {
				s.log.Warn("the continuous profile cannot begin again", "err", err)
			}
		}()
	case sess != nil && pt != nil:
		if err := sess.SetProfileRate(freq, offCPU); err != nil {
			s.log.Warn("changing the continuous profile's rate", "err", err)
		}
		if key != "" {
			pt.Mark(key, value, note)
		}
	}
}

// done ends a use of the session: one that does not keep open closes
// after idle.
func (s *sessions) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keepOpenLocked() || s.sess == nil || s.closed {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(s.idle, s.closeIdle)
}

func (s *sessions) closeIdle() {
	s.mu.Lock()
	if s.keepOpenLocked() {
		s.timer = nil
		s.mu.Unlock()
		return
	}
	sess, pt := s.sess, s.pt
	s.sess, s.pt, s.timer = nil, nil, nil
	s.mu.Unlock()
	s.closeSession(sess, pt)
}

// closeSession ends the profile's last period, then closes the session.
func (s *sessions) closeSession(sess *capture.Session, pt *continuous.Profiled) {
	if pt != nil {
		pt.Stop()
	}
	if sess == nil {
		return
	}
	if err := sess.Close(); err != nil {
		s.log.Warn("closing the capture session", "err", err)
	}
}

// finishGrace bounds how long closing waits for a capture in progress
// (cut short) to be written.
const finishGrace = time.Minute

// close waits for the capture in progress, then closes the session; no
// capture starts after.
func (s *sessions) close() {
	s.mu.Lock()
	s.closed = true
	if s.inflight > 0 {
		settled := s.settled
		s.mu.Unlock()
		select {
		case <-settled:
		case <-time.After(finishGrace):
			s.log.Error("the capture in progress was not written in time; closing its session", "waited", finishGrace)
		}
		s.mu.Lock()
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	sess, pt := s.sess, s.pt
	s.sess, s.pt = nil, nil
	s.mu.Unlock()
	s.closeSession(sess, pt)
}

// Capture implements watchdog.Capturer: it waits for the gate, then
// captures through the session.
func (s *sessions) Capture(ctx context.Context, tr model.Trigger) (*model.Result, error) {
	s.mu.Lock()
	if s.inflight == 0 {
		s.settled = make(chan struct{})
	}
	s.inflight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.inflight--; s.inflight == 0 {
			close(s.settled)
		}
		s.mu.Unlock()
	}()
	over := func(*model.Result, error) {}
	if s.gate != nil {
		var err error
		if over, err = s.gate.Admit(ctx, tr); err != nil {
			return nil, err
		}
	}
	sess, err := s.session()
	if err != nil {
		over(nil, err)
		return nil, err
	}
	defer s.done()
	res, err := sess.Capture(ctx, tr)
	over(res, err)
	return res, err
}

// Recovered implements watchdog.Capturer.
func (s *sessions) Recovered(res *model.Result, stall time.Duration) error {
	sess, err := s.session()
	if err != nil {
		return err
	}
	defer s.done()
	return sess.Recovered(res, stall)
}
