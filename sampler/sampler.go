package sampler

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
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
	pageSize int

	rateMu   sync.Mutex // one SetRate at a time
	mu       sync.Mutex
	threads  map[int]*thread // every thread seen, exited ones included (bounded)
	live     map[int]*thread // threads with open events
	exited   []int           // exited tids, oldest first, to bound threads
	freq     int
	offCPU   bool
	rates    []rateChange // on-CPU periods over time, for sample weights
	hist     *history     // nil: no flight recorder
	recs     map[*Recording]struct{}
	stats    Stats
	chainBuf []uint64
	pending  []forkedThread // threads announced by FORK records, to attach
	lastScan time.Time
	closed   bool
	gone     bool // the target exited

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
	err      string

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
}

type forkedThread struct {
	tid  int
	seen uint64
}

type rateChange struct {
	at     uint64
	period uint64
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
	Err                    string // why it could not be watched
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
	RecordingDropped uint64 // samples a Recording dropped at its byte bound
	ThreadsAttached  int    // threads whose events were opened
	ThreadsFailed    int    // threads that could not be watched (see Threads)
	ThreadsExited    int
	ThreadsLive      int
	TargetExited     bool
	ExitTime         uint64 // CLOCK_MONOTONIC ns, when TargetExited
}

const (
	// Rings wake the loop: the sample ring when half full, the side-band
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
		cfg:      cfg,
		pid:      cfg.PID,
		log:      cfg.Logger.With("pid", cfg.PID),
		dumpOn:   dumpSize(cfg.DumpOnCPU, 0),
		dumpOff:  dumpSize(cfg.DumpOffCPU, defaultDumpOffCPU),
		pageSize: os.Getpagesize(),
		threads:  map[int]*thread{},
		live:     map[int]*thread{},
		recs:     map[*Recording]struct{}{},
		freq:     cfg.Freq,
		offCPU:   cfg.OffCPU,
		epfd:     -1, wakefd: -1, pidfd: -1,
		done:       make(chan struct{}),
		loopDone:   make(chan struct{}),
		closer:     make(chan closeJob, 1024),
		closerDone: make(chan struct{}),
	}
	if cfg.History > 0 {
		s.hist = &history{maxAge: uint64(cfg.History), maxBytes: cfg.HistoryBytes}
	}
	// A record larger than its ring is dropped without even a LOST record
	// (the kernel emits LOST in front of the next record that fits, and
	// none ever does): refuse such a configuration.
	if need := s.maxRecord(); cfg.RingBytes != 0 && s.ringBytes() < need {
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
	raiseNoFile(uint64(fdsPerThread * len(tids)))
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
		if first := s.firstErr(); first != "" {
			return fmt.Errorf("sampler: could not watch any thread of pid %d: %s", s.pid, first)
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
	a := s.onCPUAttr(max(s.cfg.Freq, 1))
	fd, err := perfOpen(&a, 0)
	if err != nil {
		s.hardware = false
		s.log.Info("no hardware cycles event; sampling on cpu-clock", "err", err)
		return
	}
	unix.Close(fd)
}

// isFatal says whether an attach error at Start should stop Start: a
// permission or descriptor problem will hit every thread.
func (s *Sampler) isFatal(err error) bool {
	return !errors.Is(err, errGone) && len(s.live) == 0 || errors.Is(err, unix.EMFILE)
}

func (s *Sampler) firstErr() string {
	for _, t := range s.threads {
		if t.err != "" {
			return t.err
		}
	}
	return ""
}

func (s *Sampler) epollAdd(fd int, data int32) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: data}
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("sampler: epoll_ctl add: %w", err)
	}
	return nil
}

// maxRecord bounds the size of one sample record: the fixed fields, a
// callchain of MaxStack entries plus its context markers, the registers
// and the larger stack dump.
func (s *Sampler) maxRecord() int {
	return headerSize + 7*8 + (s.cfg.MaxStack+4)*8 + 8 + 8*userRegsCount + 16 + max(s.dumpOn, s.dumpOff)
}

// ringBytes is the data size for a new thread's ring.
func (s *Sampler) ringBytes() int {
	n := s.cfg.RingBytes
	if n == 0 {
		n = defaultRingBytes
		if per := ringBudget / (len(s.live) + 1); per < n {
			n = max(per, minRingBytes)
		}
	}
	pages := 1
	for pages*s.pageSize < n {
		pages *= 2
	}
	return pages * s.pageSize
}

// attach opens the events of thread tid. Called with s.mu held.
func (s *Sampler) attach(tid int, seen uint64) (err error) {
	t := &thread{tid: tid, seen: seen, tracker: -1, on: -1, off: -1}
	if old, ok := s.threads[tid]; ok && old.exited == 0 && old.err == "" {
		return nil
	}
	s.threads[tid] = t
	defer func() {
		if err != nil {
			s.closeThread(t)
			if errors.Is(err, errGone) {
				t.exited = monotime.Now()
				s.forget(t)
				err = nil
				return
			}
			t.err = err.Error()
			s.stats.ThreadsFailed++
			s.log.Warn("cannot watch thread", "tid", tid, "err", err)
		}
	}()
	a := s.trackerAttr()
	if t.tracker, err = s.openEvent(&a, tid, "dummy", false); err != nil {
		return err
	}
	if t.sideMem, t.side, err = s.mapRing(t.tracker, t.tid, sidePages*s.pageSize, false); err != nil {
		return err
	}
	if err := s.epollAdd(t.tracker, int32(tid)); err != nil {
		return err
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
	s.live[tid] = t
	s.stats.ThreadsAttached++
	return nil
}

// openEvent opens one event, raising RLIMIT_NOFILE once if we ran out.
func (s *Sampler) openEvent(a *unix.PerfEventAttr, tid int, what string, needsKernel bool) (int, error) {
	fd, err := perfOpen(a, tid)
	if errors.Is(err, unix.EMFILE) && raiseNoFile(uint64(fdsPerThread*(len(s.live)+16))) {
		fd, err = perfOpen(a, tid)
	}
	if err != nil {
		return -1, s.openErr(what, tid, err, needsKernel)
	}
	return fd, nil
}

// mapRing maps a ring of size data bytes on fd. With shrink, it halves
// the size while locked memory is short (Config.RingBytes unset).
func (s *Sampler) mapRing(fd, tid, size int, shrink bool) ([]byte, *ring, error) {
	for {
		mem, err := unix.Mmap(fd, 0, s.pageSize+size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err == nil {
			r, err := newRing(mem, s.pageSize)
			if err != nil {
				_ = unix.Munmap(mem)
				return nil, nil, err
			}
			return mem, r, nil
		}
		op := fmt.Sprintf("mmap of the %d KiB perf ring of thread %d of pid %d", size>>10, tid, s.pid)
		if !errors.Is(err, unix.EPERM) {
			return nil, nil, fmt.Errorf("%s: %w", op, err)
		}
		if !shrink || size <= s.pageSize || s.cfg.RingBytes != 0 {
			return nil, nil, mlockErr(op, err, s.pageSize+size)
		}
		size /= 2
		s.log.Debug("locked memory short: smaller ring", "tid", tid, "bytes", size)
	}
}

// openOnCPU opens t's on-CPU event, disabled, and maps the sample ring on
// it: the off-CPU event writes there too. It is opened even while on-CPU
// sampling is off so that the ring exists whatever SetRate does.
func (s *Sampler) openOnCPU(t *thread) error {
	a := s.onCPUAttr(max(s.freq, placeholderFreq))
	fd, err := s.openEvent(&a, t.tid, s.eventName(), s.cfg.Kernel)
	if err != nil {
		return err
	}
	t.on = fd
	if t.onID, err = eventID(fd); err != nil {
		return fmt.Errorf("PERF_EVENT_IOC_ID on thread %d: %w", t.tid, err)
	}
	t.onLayout = layoutOfAttr(&a)
	if t.mem, t.ring, err = s.mapRing(fd, t.tid, s.ringBytes(), true); err != nil {
		return err
	}
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
		a := s.offCPUAttr()
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
	if t.tracker >= 0 && s.epfd >= 0 {
		_ = unix.EpollCtl(s.epfd, unix.EPOLL_CTL_DEL, t.tracker, nil)
	}
	job := closeJob{mems: [][]byte{t.mem, t.sideMem}}
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

// loop reads the rings until Close or the target's exit.
func (s *Sampler) loop() {
	defer close(s.loopDone)
	events := make([]unix.EpollEvent, 128)
	var hup []int
	for {
		n := s.wait(events)
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
		s.mu.Unlock()
	}
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
func (s *Sampler) wait(events []unix.EpollEvent) int {
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
	now := monotime.Now()
	present := make(map[int]bool, len(tids))
	for _, tid := range tids {
		present[tid] = true
		if _, ok := s.live[tid]; !ok {
			if t, ok := s.threads[tid]; ok && t.err != "" {
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
	s.stats.ExitTime = now
	s.log.Info("target exited")
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
	if err != nil {
		s.stats.BadRecords++
		s.log.Debug("bad perf record", "tid", t.tid, "err", err)
		return 0, false
	}
	switch r.typ {
	case recSample:
		smp := s.sampleOf(&r)
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
func (s *Sampler) sampleOf(r *record) Sample {
	var kernel int
	s.chainBuf, kernel = callchain(r.chain, s.chainBuf)
	smp := Sample{
		Time:   r.time,
		PID:    int32(r.pid),
		TID:    int32(r.tid),
		CPU:    int32(r.cpu),
		Stack:  append([]uint64(nil), s.chainBuf...),
		Kernel: uint16(kernel),
	}
	if len(r.regs) > 0 {
		smp.Regs = decodeRegs(r.regs)
	}
	if len(r.stackDump) > 0 {
		smp.StackDump = append([]byte(nil), r.stackDump...)
	}
	return smp
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
				errs = append(errs, err)
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
			if err := s.enableOffCPU(t, now); err != nil {
				if !errors.Is(err, errGone) {
					errs = append(errs, err)
				}
				continue
			}
			started = append(started, t.tid)
		}
		begun = now
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
