package sampler

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Sampler samples every thread of one process. Its methods may be called
// from any goroutine.
type Sampler struct {
	cfg      Config
	pid      int
	log      *slog.Logger
	hardware bool // the on-CPU event is cycles, not cpu-clock
	dumpOn   int
	dumpOff  int
	growTo   int // Config.GrowStackCopy in force (0: copies do not grow)
	pageSize int

	rateMu  sync.Mutex // one SetRate at a time
	mu      sync.Mutex
	threads map[int]*thread // every thread seen, exited ones included (bounded)
	live    map[int]*thread // threads with open events
	exited  []int           // exited tids, oldest first, to bound threads
	freq    int
	offCPU  bool
	// expect is how many threads the target had at Start (within
	// MaxThreads), ringTotal the data bytes of every ring mapped now:
	// the rings' share of their budget (ringBytes).
	expect    int
	ringTotal int
	rates     []rateChange // on-CPU periods over time, for sample weights
	hist      *history     // nil: no flight recorder
	recs      map[*Recording]struct{}
	stats     Stats
	chainBuf  []uint64
	userBuf   []uint64
	pending   []forkedThread // threads announced by FORK records, to attach
	lastScan  time.Time
	// lastAttach is when a thread was last attached (CLOCK_MONOTONIC).
	lastAttach uint64
	// maxThreads bounds len(live) (0: none): Config.MaxThreads, lowered
	// to what fitted when the kernel said EMFILE.
	maxThreads   int
	warnedBudget bool
	closed       bool
	gone         bool // the target exited

	epfd, wakefd, pidfd int
	epfile              *os.File // owns epfd
	epconn              syscall.RawConn
	done                chan struct{}
	loopDone            chan struct{}
	// Closing a perf event that shares a ring can wait for an RCU grace
	// period (tens of ms on a busy machine); the loop hands released
	// descriptors and mappings to the closer so that a thread exit
	// never delays reading the others.
	closer     chan closeJob
	closerDone chan struct{}
}

// ThreadInfo describes a thread the sampler has seen.
type ThreadInfo struct {
	TID  int
	Name string // its comm, kept after it exits
	// Seen is when the sampler learned of the thread (its FORK record, or
	// the listing of /proc/<pid>/task); Attached when its events were
	// opened (0 if never); Exited when it exited (0 while it lives). All
	// CLOCK_MONOTONIC ns.
	Seen, Attached, Exited uint64
	OnCPUSamples           uint64
	// StackCopy is the larger of the stack copies its samples ask for
	// now (or asked for last), StackCopyGrowths how many times they grew
	// (Config.GrowStackCopy), StackCopyErr why they could not grow
	// further (nil when they could, or did not need to).
	StackCopy        int
	StackCopyGrowths int
	StackCopyErr     error
	// Err says why it could not be watched: a *perms.Error, an EMFILE
	// of perf_event_open, ... (nil when it was).
	Err error
}

// Stats counts what the sampler did and what it lost. Lost records and
// samples are the kernel's counts (PERF_RECORD_LOST, LOST_SAMPLES).
type Stats struct {
	Event            string // the on-CPU event: "cpu-clock" or "cycles"
	Samples          uint64 // on-CPU samples
	OffCPUIntervals  uint64
	LostRecords      uint64 // records the kernel dropped because a ring was full
	LostSamples      uint64
	Throttles        uint64 // PERF_RECORD_THROTTLE: the kernel slowed sampling down
	Unthrottles      uint64
	BrokenIntervals  uint64 // off-CPU intervals dropped because their end was lost
	BadRecords       uint64 // ring contents that did not decode
	HistoryEvicted   uint64 // samples aged or pushed out of the flight recorder (by design)
	RecordingDropped uint64 // samples a Recording dropped at its byte bound (Recording.Stats)
	ThreadsAttached  int    // threads whose events were opened
	ThreadsFailed    int    // threads that could not be watched (see Threads)
	// ThreadsOverBudget are threads never sampled for want of file
	// descriptors (Config.MaxThreads, or EMFILE); not in ThreadsFailed.
	ThreadsOverBudget int
	ThreadsExited     int
	ThreadsLive       int
	// StackCopyGrowths counts the times a thread's stack copies grew
	// (Config.GrowStackCopy); StackCopyGrowFailed the threads whose
	// copies could not (ThreadInfo.StackCopyErr says why).
	StackCopyGrowths    int
	StackCopyGrowFailed int
	// RingBytes is the data size of every ring mapped now: kernel
	// memory, locked, not in this process's RSS (Config.RingBytes).
	RingBytes    int
	TargetExited bool
	ExitTime     uint64 // CLOCK_MONOTONIC ns, when TargetExited
}

const (
	// Rings wake the loop: the sample ring a quarter full, the side-band
	// ring at every record (a thread started or ended). The tick only
	// bounds how stale the flight recorder gets between reads (which
	// drain first anyway) and paces the /proc backstop: on a VM each
	// wakeup of an idle Go process costs ~0.2 ms of CPU.
	tick         = 500 * time.Millisecond
	scanInterval = 500 * time.Millisecond // /proc/<pid>/task backstop
	maxExited    = 4096                   // exited threads remembered
	epollWake    = -1
	epollPidfd   = -2
)

// Start attaches to every thread of cfg.PID and begins sampling.
func Start(cfg Config) (*Sampler, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Sampler{
		cfg:        cfg,
		pid:        cfg.PID,
		log:        cfg.Logger.With("pid", cfg.PID),
		dumpOn:     dumpSize(cfg.DumpOnCPU, 0),
		dumpOff:    dumpSize(cfg.DumpOffCPU, defaultDumpOffCPU),
		pageSize:   os.Getpagesize(),
		threads:    map[int]*thread{},
		live:       map[int]*thread{},
		recs:       map[*Recording]struct{}{},
		freq:       cfg.Freq,
		offCPU:     cfg.OffCPU,
		maxThreads: cfg.MaxThreads,
		epfd:       -1, wakefd: -1, pidfd: -1,
		done:       make(chan struct{}),
		loopDone:   make(chan struct{}),
		closer:     make(chan closeJob, 1024),
		closerDone: make(chan struct{}),
	}
	if g := dumpSize(cfg.GrowStackCopy, 0); cfg.UserStack != nil && g > s.copySize() {
		s.growTo = g
	}
	if cfg.History > 0 {
		s.hist = &history{maxAge: uint64(cfg.History), maxBytes: cfg.HistoryBytes}
	}
	// A record larger than its ring is dropped without even a LOST record
	// (the kernel emits LOST in front of the next record that fits, and
	// none ever does): refuse such a configuration.
	if need := s.maxRecord(); cfg.RingBytes != 0 && s.ringBytes(s.copySize(), 0) < need {
		return nil, fmt.Errorf("sampler: RingBytes %d is smaller than the largest record this configuration writes (%d bytes)", cfg.RingBytes, need)
	}
	if cfg.Freq > 0 {
		s.rates = append(s.rates, rateChange{at: 0, period: periodOf(cfg.Freq)})
	}
	go s.closeLoop()
	if err := s.start(); err != nil {
		s.releaseAll()
		close(s.closer)
		<-s.closerDone
		s.closeFDs()
		return nil, err
	}
	go s.loop()
	return s, nil
}

func (s *Sampler) start() error {
	tids, err := procfs.Threads(s.pid)
	if err != nil {
		return fmt.Errorf("sampler: pid %d: %w", s.pid, err)
	}
	if s.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("sampler: epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(s.epfd, true); err != nil {
		return fmt.Errorf("sampler: epoll: %w", err)
	}
	s.epfile = os.NewFile(uintptr(s.epfd), "sampler-epoll")
	if s.epconn, err = s.epfile.SyscallConn(); err != nil {
		return fmt.Errorf("sampler: epoll: %w", err)
	}
	if s.wakefd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return fmt.Errorf("sampler: eventfd: %w", err)
	}
	if err := s.epollAdd(s.wakefd, epollWake); err != nil {
		return err
	}
	// A pidfd tells the moment the process exits; without one (kernels
	// before 5.3) the /proc scan notices.
	if fd, err := unix.PidfdOpen(s.pid, 0); err == nil {
		s.pidfd = fd
		if err := s.epollAdd(fd, epollPidfd); err != nil {
			return err
		}
	}
	s.probeEvent()
	if s.cfg.Kernel && s.cfg.OffCPU {
		// Blocked threads' kernel stacks are named through kallsyms
		// when their intervals are read, under the lock: have it loaded
		// before, not while the rings wait.
		warmKallsyms()
	} else if s.cfg.Kernel {
		go warmKallsyms() // for a later SetRate that turns off-CPU on
	}
	RaiseNoFile()
	if s.maxThreads > 0 && len(tids) > s.maxThreads {
		tids = busiestFirst(s.pid, tids)
	}
	s.expect = len(tids)
	if s.maxThreads > 0 {
		s.expect = min(s.expect, s.maxThreads)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Threads started while we attach are caught by their parent's FORK
	// record if the parent was already attached, else by listing again.
	for round := 0; round < 20 && len(tids) > 0; round++ {
		var fresh []int
		for _, tid := range tids {
			if _, ok := s.live[tid]; ok {
				continue
			}
			if t, ok := s.threads[tid]; ok && t.err != nil && t.exited == 0 {
				continue // refused once (over the bound, or failed)
			}
			if err := s.attach(tid, monotime.Now()); err != nil && s.isFatal(err) {
				return err
			}
			fresh = append(fresh, tid)
		}
		if len(fresh) == 0 {
			break
		}
		if tids, err = procfs.Threads(s.pid); err != nil {
			break
		}
	}
	if len(s.live) == 0 {
		if first := s.firstErr(); first != nil {
			return fmt.Errorf("sampler: could not watch any thread of pid %d: %w", s.pid, first)
		}
		return fmt.Errorf("sampler: pid %d: %w", s.pid, procfs.ErrGone)
	}
	s.lastScan = time.Now()
	s.stats.Event = "cpu-clock"
	if s.hardware {
		s.stats.Event = "cycles"
	}
	return nil
}

// probeEvent decides between cycles and cpu-clock when Hardware is asked.
func (s *Sampler) probeEvent() {
	if !s.cfg.Hardware {
		return
	}
	s.hardware = true
	a := s.onCPUAttr(max(s.cfg.Freq, 1), s.dumpOn)
	fd, err := perfOpen(&a, 0)
	if err != nil {
		s.hardware = false
		s.log.Info("no hardware cycles event; sampling on cpu-clock", "err", err)
		return
	}
	unix.Close(fd)
}

// SetRate moves every attached thread to freq on-CPU samples per second
// (0: none) and turns off-CPU sampling on or off. Each thread's event is
// changed in place, so no thread goes unsampled in between.
func (s *Sampler) SetRate(freq int, offCPU bool) error {
	if err := checkFreq(freq); err != nil {
		return err
	}
	s.rateMu.Lock()
	defer s.rateMu.Unlock()
	started, begun, err := s.setRate(freq, offCPU)
	if len(started) == 0 {
		return err
	}
	// Threads blocked at this moment are looked at through /proc without
	// the lock: with many threads and an unwinder behind BlockedStack it
	// takes a while, and the rings must go on being read meanwhile.
	if s.cfg.Kernel {
		warmKallsyms()
	}
	probes := make([]blockedProbe, len(started))
	for i, tid := range started {
		probes[i] = s.probe(tid, begun)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, tid := range started {
		if t, ok := s.live[tid]; ok {
			probes[i].apply(t)
		}
	}
	return err
}

// setRate changes the events under the lock; it returns the threads whose
// off-CPU observation just began, and when.
func (s *Sampler) setRate(freq int, offCPU bool) (started []int, begun uint64, _ error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, 0, errors.New("sampler: SetRate after Close")
	}
	if s.gone {
		s.freq, s.offCPU = freq, offCPU
		return nil, 0, nil
	}
	s.drainAll()
	now := monotime.Now()
	var errs []error
	onCPU := partial{what: "changing the on-CPU rate", threads: len(s.live)}
	offs := partial{what: "opening off-CPU events", threads: len(s.live)}
	var opened []*thread // off-CPU events opened by this call, in order
	if freq != s.freq {
		s.freq = freq
		if freq > 0 {
			s.rates = append(s.rates, rateChange{at: now, period: periodOf(freq)})
			if len(s.rates) > 64 {
				s.rates = s.rates[len(s.rates)-64:]
			}
		}
		for _, t := range s.live {
			var err error
			if freq > 0 {
				err = s.startOnCPU(t)
			} else if t.onEnabled {
				err = disable(t.on)
				t.onEnabled = false
			}
			if err != nil && !errors.Is(err, errGone) && !errors.Is(err, unix.ESRCH) {
				onCPU.add(err)
			}
		}
	}
	if offCPU != s.offCPU {
		s.offCPU = offCPU
		if !offCPU {
			// Read what was recorded before the switch so that every
			// interval's end is seen before the rest are cut here.
			for _, t := range s.live {
				if t.offEnabled {
					_ = disable(t.off)
					t.offEnabled = false
				}
			}
			s.drainAll()
		}
		now = monotime.Now()
		for _, t := range s.live {
			if !offCPU {
				s.stopOffCPU(t, now)
				continue
			}
			if t.off < 0 && offs.outOfFDs {
				offs.failed++ // another EMFILE: not asked again
				continue
			}
			fresh := t.off < 0
			if err := s.enableOffCPU(t, now); err != nil {
				if !errors.Is(err, errGone) {
					offs.add(err)
					if offs.outOfFDs {
						offs.failed += s.giveBack(opened, fdReserve)
						opened = nil
					}
				}
				continue
			}
			if fresh {
				opened = append(opened, t)
			}
			started = append(started, t.tid)
		}
		begun = now
		started = slices.DeleteFunc(started, func(tid int) bool {
			t, ok := s.live[tid]
			return !ok || !t.offEnabled
		})
	}
	for _, p := range []partial{onCPU, offs} {
		if p.failed > 0 {
			errs = append(errs, &PartialError{What: p.what, Failed: p.failed, Threads: p.threads, Err: p.first})
		}
	}
	return started, begun, errors.Join(errs...)
}

// OffCPUSince reports whether thread tid is off the CPU now, and since
// when (CLOCK_MONOTONIC ns). It knows only while off-CPU sampling is on.
func (s *Sampler) OffCPUSince(tid int) (since uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drainLocked()
	t, found := s.live[tid]
	if !found {
		return 0, false
	}
	iv, ok := t.oc.current(monotime.Now())
	return iv.Time, ok
}

// drainLocked reads the rings if the loop still runs (not after Close or
// the target's exit, when they are gone).
func (s *Sampler) drainLocked() {
	if !s.closed && !s.gone {
		s.drainAll()
	}
}

// History returns a copy of the flight recorder's samples that overlap
// [from, to] (CLOCK_MONOTONIC ns) and the last Config.History, clipped to
// both and sorted by time, with
// the off-CPU intervals still open closed at to (or now). Stack and
// StackDump are shared with the recorder: do not modify them.
func (s *Sampler) History(from, to uint64) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drainLocked()
	now := monotime.Now()
	if s.hist == nil || to < from {
		return nil
	}
	// Eviction works by whole chunks; the age bound is exact for readers.
	if now > s.hist.maxAge {
		from = max(from, now-s.hist.maxAge)
	}
	if to < from {
		return nil
	}
	out := s.hist.window(from, to, nil)
	out = s.appendOpen(out, from, min(to, now))
	sortByTime(out)
	return out
}

// appendOpen appends the open off-CPU intervals, closed at end and clipped
// to [from, end].
func (s *Sampler) appendOpen(dst []Sample, from, end uint64) []Sample {
	for _, t := range s.live {
		if iv, ok := t.oc.current(end); ok {
			if c, ok := clip(iv, from, end); ok {
				dst = append(dst, c)
			}
		}
	}
	return dst
}

// Threads lists every thread seen, sorted by TID.
func (s *Sampler) Threads() []ThreadInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drainLocked()
	out := make([]ThreadInfo, 0, len(s.threads))
	for _, t := range s.threads {
		out = append(out, ThreadInfo{
			TID: t.tid, Name: t.name, Seen: t.seen, Attached: t.attached,
			Exited: t.exited, OnCPUSamples: t.samples, Err: t.err,
			StackCopy: t.copySize(), StackCopyGrowths: t.copies.grown, StackCopyErr: t.copies.err,
		})
	}
	sortThreads(out)
	return out
}

// Stats returns the counters so far.
func (s *Sampler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drainLocked()
	return s.statsLocked()
}

func (s *Sampler) statsLocked() Stats {
	st := s.stats
	st.ThreadsLive = len(s.live)
	st.RingBytes = s.ringTotal
	for _, t := range s.live {
		st.BrokenIntervals += t.oc.broken
	}
	if s.hist != nil {
		st.HistoryEvicted = s.hist.evicted
	}
	return st
}

// Done is closed when the target process has exited.
func (s *Sampler) Done() <-chan struct{} { return s.done }

// Close stops sampling and releases every descriptor and mapping. Samples
// already recorded stay readable (History, Recording.Stop).
func (s *Sampler) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	var one = [8]byte{1}
	_, _ = unix.Write(s.wakefd, one[:])
	<-s.loopDone
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.live {
		s.closeThread(t)
		delete(s.live, t.tid)
	}
	close(s.closer)
	<-s.closerDone
	s.closeFDs()
	return nil
}
