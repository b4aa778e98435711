package sampler

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
)

// rateChange is an on-CPU period that took effect at a time.
type rateChange struct {
	at     uint64
	period uint64
}

// loop reads the rings until Close or the target's exit.
func (s *Sampler) loop() {
	defer close(s.loopDone)
	events := make([]unix.EpollEvent, 128)
	var hup []int
	s.mu.Lock()
	next := s.nextTick(monotime.Now())
	s.mu.Unlock()
	for {
		n := s.wait(events, next)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return
		}
		exited := false
		hup = hup[:0]
		for _, ev := range events[:max(n, 0)] {
			switch ev.Fd {
			case epollWake:
				var b [8]byte
				_, _ = unix.Read(s.wakefd, b[:])
			case epollPidfd:
				exited = true
			default:
				if ev.Events&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
					hup = append(hup, int(ev.Fd))
				}
			}
		}
		s.drainAll()
		now := monotime.Now()
		for _, tid := range hup {
			if t, ok := s.live[tid]; ok {
				s.release(t, now)
			}
		}
		if !exited && time.Since(s.lastScan) >= scanInterval {
			exited = s.scan()
			s.lastScan = time.Now()
		}
		if exited {
			s.targetExited()
			s.mu.Unlock()
			return
		}
		next = s.nextTick(now)
		s.mu.Unlock()
	}
}

// nextTick is how long the loop waits for a ring at most (s.mu held:
// a reader's drain attaches threads too): tick, but
// settleTick while a thread attached in the last settleFor may yet need
// larger stack copies, so that its first samples, not a quarter ring of
// them, decide (grow).
func (s *Sampler) nextTick(now uint64) time.Duration {
	if s.growTo > 0 && now-s.lastAttach < uint64(settleFor) {
		return settleTick
	}
	return tick
}

// wait returns after a wakeup or a tick, with the events its epoll set
// reports. The set waits in Go's poller rather than in a blocking
// epoll_wait: a goroutine parked in a system call keeps sysmon polling
// (most of the sampler's own CPU when measured). Polling a perf descriptor
// consumes its readiness (perf_poll clears rb->poll), so the poller's own
// check eats the ring's EPOLLIN and the epoll_wait here may find nothing;
// a wakeup from the poller is therefore taken as "read the rings",
// whatever epoll_wait then says. Hang-ups, the pidfd and the eventfd are
// reported either way (their readiness is not consumed).
func (s *Sampler) wait(events []unix.EpollEvent, tick time.Duration) int {
	n, first := 0, true
	_ = s.epfile.SetReadDeadline(time.Now().Add(tick))
	err := s.epconn.Read(func(fd uintptr) bool {
		var err error
		n, err = unix.EpollWait(int(fd), events, 0)
		if err != nil {
			n = 0
		}
		if first && n == 0 {
			first = false
			return false // nothing yet: wait in the poller
		}
		return true
	})
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		s.log.Error("epoll", "err", err)
		time.Sleep(tick)
	}
	return n
}

// scan compares the live threads with /proc/<pid>/task: a backstop for
// threads whose FORK or EXIT record we could not see. It reports whether
// the target is gone.
func (s *Sampler) scan() bool {
	if s.pidfd < 0 && !procfs.Alive(s.pid) {
		return true
	}
	tids, err := procfs.Threads(s.pid)
	if err != nil {
		return errors.Is(err, procfs.ErrGone)
	}
	// Threads new to us: their FORK records, written since the last drain
	// (which a loaded machine may have left long ago), say when they
	// started; read them before the scan takes its own time for theirs.
	for _, tid := range tids {
		if _, ok := s.live[tid]; !ok {
			s.drainAll()
			break
		}
	}
	now := monotime.Now()
	present := make(map[int]bool, len(tids))
	for _, tid := range tids {
		present[tid] = true
		if _, ok := s.live[tid]; !ok {
			if t, ok := s.threads[tid]; ok && t.err != nil {
				continue // failed once; do not retry every scan
			}
			_ = s.attach(tid, now)
		}
	}
	for tid, t := range s.live {
		if !present[tid] {
			s.release(t, now)
		}
	}
	return false
}

// targetExited records the end of the target: every thread is released.
func (s *Sampler) targetExited() {
	if s.gone {
		return
	}
	now := monotime.Now()
	s.drainAll()
	for _, t := range s.live {
		s.release(t, now)
	}
	s.gone = true
	s.stats.TargetExited = true
	// The exit is when its last thread exited, as the threads' EXIT
	// records tell (now, if one had none to tell).
	s.stats.ExitTime = 0
	for _, t := range s.threads {
		s.stats.ExitTime = max(s.stats.ExitTime, t.exited)
	}
	if s.stats.ExitTime == 0 {
		s.stats.ExitTime = now
	}
	s.log.Debug("target exited") // Stats say it; the watchdog logs it once
	close(s.done)
}

// drainAll reads every live ring, then attaches the threads their FORK
// records announced.
func (s *Sampler) drainAll() {
	for _, t := range s.live {
		s.drain(t)
	}
	for len(s.pending) > 0 {
		f := s.pending[0]
		s.pending = s.pending[1:]
		if err := s.attach(f.tid, f.seen); err == nil {
			if t, ok := s.live[f.tid]; ok {
				s.drain(t)
			}
		}
	}
	s.pending = s.pending[:0]
}

// drain reads t's sample ring, then its side-band ring (whose EXIT record
// ends the thread, after its last samples).
func (s *Sampler) drain(t *thread) {
	var exit uint64
	for _, r := range []*ring{t.ring, t.side} {
		if r == nil || r.pending() == 0 {
			continue
		}
		r.read(func(b []byte) {
			if when, ok := s.handle(t, b); ok {
				exit = when
			}
		})
		if r.corrupt > 0 {
			s.stats.BadRecords += r.corrupt
			r.corrupt = 0
		}
	}
	if exit != 0 {
		s.release(t, exit)
		return
	}
	if t.copies.want {
		if _, live := s.live[t.tid]; live {
			s.grow(t)
		}
	}
}

// handle processes one record of t's ring. It reports the thread's exit.
func (s *Sampler) handle(t *thread, b []byte) (exit uint64, exited bool) {
	r, err := decodeRecord(b, func(id uint64) (layout, bool) {
		switch id {
		case t.onID:
			return t.onLayout, t.on >= 0
		case t.offID:
			return t.offLayout, t.off >= 0
		}
		return layout{}, false
	})
	if err != nil && t.replacing(b) {
		return 0, false
	}
	if err != nil {
		s.stats.BadRecords++
		s.log.Debug("bad perf record", "tid", t.tid, "err", err)
		return 0, false
	}
	if r.typ != recLost && r.typ != recLostSamples && t.seenTwice(r.time) {
		return 0, false
	}
	switch r.typ {
	case recSample:
		smp := s.sampleOf(&r)
		if r.stackAsked > 0 && s.cfg.UserStack != nil {
			s.noteCopy(t, r.id, r.stackAsked, smp.Cut)
		}
		if r.id == t.onID && t.on >= 0 {
			smp.Kind = OnCPU
			smp.Weight = s.weightAt(r.time)
			t.samples++
			s.emit(smp, r.time)
		} else {
			t.oc.switchOutSample(smp)
		}
	case recSwitch:
		if r.misc&miscSwitchOut != 0 {
			t.oc.switchOut(r.time, r.misc&miscSwitchOutPreempt != 0, int32(r.pid), int32(r.tid), int32(r.cpu))
		} else if iv, ok := t.oc.switchIn(r.time, int32(r.pid), int32(r.tid)); ok {
			s.emit(iv, r.time)
		}
	case recLost:
		s.stats.LostRecords += r.lost
	case recLostSamples:
		s.stats.LostSamples += r.lost
	case recThrottle:
		s.stats.Throttles++
	case recUnthrottle:
		s.stats.Unthrottles++
	case recFork:
		if int(r.taskPid) == s.pid && r.taskTid != r.taskPid {
			s.pending = append(s.pending, forkedThread{tid: int(r.taskTid), seen: r.time})
		}
	case recExit:
		if int(r.taskTid) == t.tid {
			return r.time, true
		}
	case recComm:
		if int(r.tid) == t.tid && r.comm != "" {
			t.name = r.comm
		}
	}
	return 0, false
}

// sampleOf copies a sample record into a Sample (kind and weight aside).
// With a Config.UserStack the user part of the stack is unwound here,
// from the record's registers and stack copy, which are not kept.
func (s *Sampler) sampleOf(r *record) Sample {
	var kernel int
	s.chainBuf, kernel = callchain(r.chain, s.chainBuf)
	smp := Sample{
		Time:   r.time,
		PID:    int32(r.pid),
		TID:    int32(r.tid),
		CPU:    int32(r.cpu),
		Kernel: uint16(kernel),
	}
	var regs UserRegs
	if len(r.regs) > 0 {
		regs = decodeRegs(r.regs)
	}
	if s.cfg.UserStack != nil && len(s.chainBuf) > kernel {
		s.userBuf = append(s.userBuf[:0], s.chainBuf[:kernel]...)
		us := UserSample{TID: smp.TID, Time: r.time, Regs: regs, Stack: r.stackDump, Asked: r.stackAsked, FP: s.chainBuf[kernel:]}
		s.userBuf, smp.Cut = s.cfg.UserStack(us, s.userBuf)
		smp.Stack = append([]uint64(nil), s.userBuf...)
		s.annotate(&smp)
		return smp
	}
	smp.Stack = append([]uint64(nil), s.chainBuf...)
	s.annotate(&smp)
	smp.Regs = regs
	if len(r.stackDump) > 0 {
		smp.StackDump = append([]byte(nil), r.stackDump...)
	}
	return smp
}

// annotate asks Config.Annotate for the interpreter frames of a sample.
func (s *Sampler) annotate(smp *Sample) {
	if s.cfg.Annotate == nil || len(smp.Stack) <= int(smp.Kernel) {
		return
	}
	if h := s.cfg.Annotate(smp.TID, smp.Time, smp.Stack[smp.Kernel:]); len(h) > 0 {
		smp.Interp = append([]uint64(nil), h...)
	}
}

// weightAt is the on-CPU period in force at time t.
func (s *Sampler) weightAt(t uint64) uint64 {
	for i := len(s.rates) - 1; i >= 0; i-- {
		if s.rates[i].at <= t {
			return s.rates[i].period
		}
	}
	if len(s.rates) > 0 {
		return s.rates[0].period
	}
	return 0
}

// emit hands a finished sample to the flight recorder and the recordings.
func (s *Sampler) emit(smp Sample, now uint64) {
	if smp.Kind == OnCPU {
		s.stats.Samples++
	} else {
		if smp.Weight == 0 {
			return
		}
		s.stats.OffCPUIntervals++
	}
	if s.hist != nil {
		s.hist.add(smp, now)
	}
	for r := range s.recs {
		r.add(smp)
	}
}
