package sampler

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
)

type closeJob struct {
	fds  []int
	mems [][]byte
}

// thread is one watched thread.
type thread struct {
	tid      int
	name     string
	seen     uint64
	attached uint64
	exited   uint64
	samples  uint64
	err      error // why it could not be watched

	tracker, on, off int // fds; -1 when not open
	onID, offID      uint64
	onLayout         layout
	offLayout        layout
	onEnabled        bool
	offEnabled       bool
	mem              []byte // the sample ring's mapping, on the on-CPU event
	ring             *ring
	sideMem          []byte // the tracker's ring: FORK, EXIT, COMM
	side             *ring
	oc               offTracker

	// dumpOn and dumpOff are the stack copies its events ask for now;
	// copies tells how they served (grow.go).
	dumpOn, dumpOff int
	copies          copyUse
	// from and until bound the times of the records kept while a
	// regrowth's old and new events overlap (grow, seenTwice); next are
	// the ids of the new events while the old ring is read (replacing).
	from, until uint64
	next        [2]uint64
}

// copySize is the larger of t's two stack copies.
func (t *thread) copySize() int { return max(t.dumpOn, t.dumpOff) }

type forkedThread struct {
	tid  int
	seen uint64
}

// isFatal says whether an attach error at Start should stop Start: a
// problem on the first thread (a permission) will hit every thread. Past
// the first, a thread that cannot be watched is counted, and running out
// of descriptors bounds the threads instead (overBudget).
func (s *Sampler) isFatal(err error) bool {
	return !errors.Is(err, errGone) && len(s.live) == 0
}

// full reports whether the descriptor bound leaves no room for another
// thread.
func (s *Sampler) full() bool {
	return s.maxThreads > 0 && len(s.live) >= s.maxThreads
}

// overBudget records that thread t is not sampled for want of
// descriptors: the plan's bound, or the kernel's EMFILE (cause), which
// then becomes the bound. It is said once in the log, and counted.
func (s *Sampler) overBudget(t *thread, cause error) {
	t.err = ErrOverBudget
	if cause != nil {
		t.err = fmt.Errorf("%w: %w", ErrOverBudget, cause)
		if s.maxThreads == 0 || len(s.live) < s.maxThreads {
			s.maxThreads = max(len(s.live), 1)
		}
	}
	s.stats.ThreadsOverBudget++
	if !s.warnedBudget {
		s.warnedBudget = true
		s.log.Warn("threads past the file descriptor bound are not sampled (counted in the capture)",
			"threads_sampled", len(s.live), "first_unsampled_tid", t.tid, "err", t.err)
	}
}

func (s *Sampler) firstErr() error {
	for _, t := range s.threads {
		if t.err != nil {
			return t.err
		}
	}
	return nil
}

func (s *Sampler) epollAdd(fd int, data int32) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: data}
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("sampler: epoll_ctl add: %w", err)
	}
	return nil
}

// maxRecord bounds the size of one sample record at the stack copy the
// sampler starts with (recordFor).
func (s *Sampler) maxRecord() int { return s.recordFor(s.copySize()) }

// copySize is the larger of the two stack copies threads start with.
func (s *Sampler) copySize() int { return max(s.dumpOn, s.dumpOff) }

// recordFor bounds the size of one sample record whose stack copy is dump
// bytes: the fixed fields, a callchain of MaxStack entries plus its context
// markers, the registers and the copy.
func (s *Sampler) recordFor(dump int) int {
	return headerSize + 7*8 + (s.cfg.MaxStack+4)*8 + 8 + 8*userRegsCount + 16 + dump
}

// ringBytes is the data size for a thread's ring whose largest stack copy
// is dump bytes (Config.RingBytes): what RingHold of records at the peak
// rate fill, within this thread's share of the budget for all rings
// (rounded down, so that the shares add up to no more than it; reclaim is
// the size of a ring of this thread that the new one replaces), never less
// than two of the largest records (one larger than its ring would be
// dropped unannounced).
func (s *Sampler) ringBytes(dump, reclaim int) int {
	if s.cfg.RingBytes != 0 {
		return s.pow2Pages(s.cfg.RingBytes)
	}
	want := s.pow2Pages(min(s.peakBytesPerSecond(dump)*int(RingHold/time.Millisecond)/1000, maxRingBytes))
	threads := max(s.expect, len(s.live)+1)
	if reclaim > 0 {
		threads = max(s.expect, len(s.live))
	}
	share := s.pow2PagesBelow(min(ringBudget/threads, ringBudget-s.ringTotal+reclaim))
	return max(min(want, share), s.pow2Pages(max(minRingBytes, 2*s.recordFor(dump))))
}

// pow2Pages rounds n up to a power of two of pages.
func (s *Sampler) pow2Pages(n int) int {
	pages := 1
	for pages*s.pageSize < n {
		pages *= 2
	}
	return pages * s.pageSize
}

// pow2PagesBelow rounds n down to a power of two of pages (0 below a
// page).
func (s *Sampler) pow2PagesBelow(n int) int {
	if n < s.pageSize {
		return 0
	}
	pages := 1
	for 2*pages*s.pageSize <= n {
		pages *= 2
	}
	return pages * s.pageSize
}

// peakBytesPerSecond is what one thread's records may write a second at
// the peak rate: a sample of the largest size (a stack copy of dump
// bytes) per period, and with off-CPU sampling AssumedSwitches switch-out
// samples and their two switch records.
func (s *Sampler) peakBytesPerSecond(dump int) int {
	rec := s.recordFor(dump)
	per := s.cfg.PeakFreq * rec
	if s.cfg.PeakOffCPU {
		per += AssumedSwitches * (rec + 2*(headerSize+trailerSize))
	}
	return max(per, defaultRingBytes)
}

// attach opens the events of thread tid. Called with s.mu held.
func (s *Sampler) attach(tid int, seen uint64) (err error) {
	t := &thread{tid: tid, seen: seen, tracker: -1, on: -1, off: -1, dumpOn: s.dumpOn, dumpOff: s.dumpOff}
	if old, ok := s.threads[tid]; ok && old.exited == 0 && (old.err == nil || errors.Is(old.err, ErrOverBudget)) {
		return old.err // watched, or refused once for want of descriptors: never retried
	}
	s.threads[tid] = t
	if s.full() {
		if name, err := procfs.Comm(s.pid, tid); err == nil {
			t.name = name
		}
		s.overBudget(t, nil)
		return t.err
	}
	defer func() {
		if err != nil {
			s.closeThread(t)
			if errors.Is(err, errGone) {
				t.exited = monotime.Now()
				s.forget(t)
				err = nil
				return
			}
			if IsDescriptorShortage(err) && len(s.live) > 0 {
				s.overBudget(t, err)
				err = t.err
				return
			}
			t.err = err
			s.stats.ThreadsFailed++
			s.log.Warn("cannot watch thread", "tid", tid, "err", err)
		}
	}()
	if !s.cfg.FoldTracker {
		if err := s.openTracker(t); err != nil {
			return err
		}
	}
	if name, err := procfs.Comm(s.pid, tid); err == nil {
		t.name = name
	}
	if err := s.openOnCPU(t); err != nil {
		return err
	}
	if s.freq > 0 {
		if err := s.startOnCPU(t); err != nil {
			return err
		}
	}
	if s.offCPU {
		if err := s.startOffCPU(t, monotime.Now()); err != nil {
			return err
		}
	}
	t.attached = monotime.Now()
	s.lastAttach = t.attached
	s.live[tid] = t
	s.stats.ThreadsAttached++
	return nil
}

// openTracker opens t's tracker event and its side-band ring.
func (s *Sampler) openTracker(t *thread) (err error) {
	a := s.trackerAttr()
	if t.tracker, err = s.openEvent(&a, t.tid, "dummy", false); err != nil {
		return err
	}
	if t.sideMem, t.side, err = s.mapRing(t.tracker, t.tid, sidePages*s.pageSize); err != nil {
		return err
	}
	return s.epollAdd(t.tracker, int32(t.tid))
}

// openEvent opens one event, raising RLIMIT_NOFILE once if we ran out.
func (s *Sampler) openEvent(a *unix.PerfEventAttr, tid int, what string, needsKernel bool) (int, error) {
	fd, err := perfOpen(a, tid)
	if errors.Is(err, unix.EMFILE) && RaiseNoFile() {
		fd, err = perfOpen(a, tid)
	}
	if err != nil {
		return -1, s.openErr(what, tid, err, needsKernel)
	}
	return fd, nil
}

// mapRing maps a ring of size data bytes on fd. EPERM is locked memory
// running short (mlockErr).
func (s *Sampler) mapRing(fd, tid, size int) ([]byte, *ring, error) {
	mem, err := unix.Mmap(fd, 0, s.pageSize+size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		op := fmt.Sprintf("mmap of the %d KiB perf ring of thread %d of pid %d", size>>10, tid, s.pid)
		if errors.Is(err, unix.EPERM) {
			return nil, nil, mlockErr(op, err, s.pageSize+size)
		}
		return nil, nil, fmt.Errorf("%s: %w", op, err)
	}
	r, err := newRing(mem, s.pageSize)
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, nil, err
	}
	return mem, r, nil
}

// openOnCPU opens t's on-CPU event, disabled, and maps the sample ring on
// it: the off-CPU event writes there too. It is opened even while on-CPU
// sampling is off so that the ring exists whatever SetRate does.
//
// The reader is woken when a quarter of the ring is full, a watermark set
// when the event is opened: when locked memory is short for the ring
// (Config.RingBytes unset), the event is opened again with a ring half
// the size, and so on, so that the watermark always fits the ring.
func (s *Sampler) openOnCPU(t *thread) error {
	size := s.ringBytes(t.copySize(), 0)
	for {
		err := s.openOnCPUSized(t, size)
		if !errors.Is(err, unix.EPERM) || t.mem != nil || s.cfg.RingBytes != 0 || size/2 < s.pow2Pages(2*s.recordFor(t.copySize())) {
			return err
		}
		unix.Close(t.on) // not yet in epoll, never enabled
		t.on = -1
		size /= 2
		s.log.Debug("locked memory short: smaller ring", "tid", t.tid, "bytes", size)
	}
}

// openOnCPUSized opens t's on-CPU event with a ring of size bytes.
func (s *Sampler) openOnCPUSized(t *thread, size int) error {
	a := s.onCPUAttr(max(s.freq, placeholderFreq), t.dumpOn)
	a.Wakeup = s.wakeupBytes(size)
	fd, err := s.openEvent(&a, t.tid, s.eventName(), s.cfg.Kernel)
	if err != nil {
		return err
	}
	t.on = fd
	if t.onID, err = eventID(fd); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_ID on thread %d: %w", t.tid, err)
	}
	t.onLayout = layoutOfAttr(&a)
	if t.mem, t.ring, err = s.mapRing(fd, t.tid, size); err != nil {
		return err
	}
	s.ringTotal += size
	return s.epollAdd(fd, int32(t.tid))
}

// sidePages is the size of the side-band ring: 128 FORK records, for a
// burst of thread starts while the reader waits for a CPU (the /proc scan
// catches what a full ring loses).
const sidePages = 2

// placeholderFreq is the rate an on-CPU event is opened with while on-CPU
// sampling is off; SetRate sets the real one before enabling it.
const placeholderFreq = 49

func (s *Sampler) startOnCPU(t *thread) error {
	if err := setPeriod(t.on, s.periodArg(s.freq)); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_PERIOD on thread %d: %w", t.tid, err)
	}
	if !t.onEnabled {
		if err := enable(t.on); err != nil {
			return fmt.Errorf("PERF_EVENT_IOC_ENABLE on thread %d: %w", t.tid, err)
		}
		t.onEnabled = true
	}
	return nil
}

func (s *Sampler) eventName() string {
	if s.hardware {
		return "cycles"
	}
	return "cpu-clock"
}

// periodArg is PERF_EVENT_IOC_PERIOD's argument: a frequency for the
// cycles event (frequency mode), a period in ns for cpu-clock.
func (s *Sampler) periodArg(freq int) uint64 {
	if s.hardware {
		return uint64(freq)
	}
	return periodOf(freq)
}

// startOffCPU enables context-switch sampling of t at time now, and opens
// an interval if the thread is blocked at that moment.
func (s *Sampler) startOffCPU(t *thread, now uint64) error {
	if err := s.enableOffCPU(t, now); err != nil {
		return err
	}
	s.probe(t.tid, now).apply(t)
	return nil
}

// blockedProbe is what /proc showed of a thread when off-CPU observation
// of it began.
type blockedProbe struct {
	begun    uint64
	blocked  *Sample
	runnable bool
	kernel   []procfs.KernelFrame
}

// probe looks at thread tid through /proc for an observation begun at
// begun. It reads nothing that s.mu guards, so SetRate runs it without
// the lock.
func (s *Sampler) probe(tid int, begun uint64) blockedProbe {
	p := blockedProbe{begun: begun}
	p.blocked, p.runnable, p.kernel = s.blockedNow(tid, begun)
	return p
}

// apply hands a probe to t's tracker if observation has not restarted
// since.
func (p blockedProbe) apply(t *thread) {
	if t.oc.watching && t.oc.begun == p.begun {
		t.oc.adopt(p.blocked, p.runnable, p.kernel, kernelAddrs)
	}
}

// enableOffCPU opens (once) and enables t's context-switch event, and
// starts its tracker at now.
func (s *Sampler) enableOffCPU(t *thread, now uint64) error {
	if t.off < 0 {
		if err := s.openOffCPU(t); err != nil {
			return err
		}
	}
	if t.offEnabled {
		return nil
	}
	if err := enable(t.off); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_ENABLE on thread %d: %w", t.tid, err)
	}
	t.offEnabled = true
	t.oc.watch(now)
	return nil
}

// openOffCPU opens t's context-switch event, disabled, writing into the
// on-CPU event's ring.
func (s *Sampler) openOffCPU(t *thread) error {
	a := s.offCPUAttr(t.dumpOff)
	fd, err := s.openEvent(&a, t.tid, "context-switches", true)
	if err != nil {
		return err
	}
	t.off = fd
	if err := setOutput(fd, t.on); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_SET_OUTPUT on thread %d: %w", t.tid, err)
	}
	if t.offID, err = eventID(fd); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_ID on thread %d: %w", t.tid, err)
	}
	t.offLayout = layoutOfAttr(&a)
	return nil
}

// stopOffCPU disables context-switch sampling of t; the open interval
// ends at now.
func (s *Sampler) stopOffCPU(t *thread, now uint64) {
	if t.offEnabled {
		_ = disable(t.off)
		t.offEnabled = false
	}
	if iv, ok := t.oc.end(now); ok {
		s.emit(iv, now)
	}
}

// release stops watching t (it exited, or the target did) at time when,
// after reading what its ring still holds.
func (s *Sampler) release(t *thread, when uint64) {
	if _, ok := s.live[t.tid]; !ok {
		return
	}
	delete(s.live, t.tid) // first: the drain may meet its EXIT record
	s.drain(t)
	if iv, ok := t.oc.end(when); ok {
		s.emit(iv, when)
	}
	s.stats.BrokenIntervals += t.oc.broken
	t.oc.broken = 0
	s.closeThread(t)
	t.exited = when
	s.stats.ThreadsExited++
	s.forget(t)
}

// forget remembers t as exited, dropping the oldest exited threads past
// maxExited.
func (s *Sampler) forget(t *thread) {
	s.exited = append(s.exited, t.tid)
	for len(s.exited) > maxExited {
		old := s.exited[0]
		s.exited = s.exited[1:]
		if ot, ok := s.threads[old]; ok && ot.exited != 0 {
			delete(s.threads, old)
		}
	}
}

// closeThread stops t's events now and has the closer release them.
func (s *Sampler) closeThread(t *thread) {
	s.epollDel(t.tracker, t.on)
	job := closeJob{mems: [][]byte{t.mem, t.sideMem}}
	if t.mem != nil {
		s.ringTotal -= len(t.mem) - s.pageSize
	}
	for _, fd := range []*int{&t.on, &t.off, &t.tracker} {
		if *fd >= 0 {
			job.fds = append(job.fds, *fd)
			*fd = -1
		}
	}
	t.mem, t.ring, t.sideMem, t.side = nil, nil, nil, nil
	t.onEnabled, t.offEnabled = false, false
	if len(job.fds) > 0 {
		s.closer <- job
	}
}

// epollDel takes fds out of the epoll set before the closer unmaps their
// rings: an event without a ring polls EPOLLHUP (perf_poll), which the
// loop takes for its thread's exit.
func (s *Sampler) epollDel(fds ...int) {
	for _, fd := range fds {
		if fd >= 0 && s.epfd >= 0 {
			_ = unix.EpollCtl(s.epfd, unix.EPOLL_CTL_DEL, fd, nil)
		}
	}
}

func (s *Sampler) closeLoop() {
	defer close(s.closerDone)
	for job := range s.closer {
		for _, mem := range job.mems {
			if mem != nil {
				_ = unix.Munmap(mem)
			}
		}
		for _, fd := range job.fds {
			unix.Close(fd)
		}
	}
}

func (s *Sampler) releaseAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.live {
		s.closeThread(t)
		delete(s.live, t.tid)
	}
}

func (s *Sampler) closeFDs() {
	if s.epfile != nil {
		s.epfile.Close()
		s.epfile, s.epfd = nil, -1
	}
	for _, fd := range []*int{&s.epfd, &s.wakefd, &s.pidfd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}
