package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stallwatch/stallwatch/internal/child"
	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/schedclock"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes"
	"github.com/stallwatch/stallwatch/symbolize"
	"github.com/stallwatch/stallwatch/target"
	"golang.org/x/sys/unix"
)

// Options says how a snapshot is taken.
type Options struct {
	// NoPtrace reads user stacks without stopping any thread: the
	// instruction and stack pointers of a thread blocked in the kernel come
	// from /proc/<pid>/task/<tid>/syscall; running threads get none.
	NoPtrace bool
	// Target is what is known of the process (its files, unwind tables,
	// symbols, memory), shared with whoever else reads it. Nil: Take
	// opens one for the snapshot (kernel symbols, ELF files, the
	// target's JIT dumps and perf maps).
	Target *target.Process
	// OffCPUSince tells, from a running sampler, since when (CLOCK_MONOTONIC
	// ns) a thread has been off the CPU. Used where the kernel's own
	// accounting (/proc/<pid>/task/<tid>/sched) is absent.
	OffCPUSince func(tid int) (since uint64, ok bool)
	// Stops remembers across snapshots since when the threads they
	// stopped had been off the CPU, which our stop resets in the
	// kernel's accounting (stops.go). Nil: this stallwatch process's
	// book, shared by all its snapshots.
	Stops *StopBook
	// Unread are runtimes whose state the snapshot leaves unread: the
	// caller reads it another way (a JVM's own thread dump, where its
	// memory cannot be read: package capture).
	Unread []*runtimes.Runtime
	Logger *slog.Logger
	// stopSleepers stops threads asleep in a system call too, which are
	// otherwise read without a stop (asleep.go): the tests' reference,
	// and their way to the stop's paths.
	stopSleepers bool
	// walkStopped walks every stopped thread's stack under its stop, as
	// all were before the walk was put after the detach (stopThread).
	walkStopped bool
}

// shortOfStart says whether a walk ended before the thread's first
// function for another reason than its depth.
func shortOfStart(c unwind.Cut) bool { return c.Truncated() && c.Reason != unwind.TooDeep }

// maxFrames bounds each user stack.
const maxFrames = unwind.MaxFrames

// Take snapshots every thread of pid. It returns an error only when there
// is nothing to show (no such process, not permitted to read even its
// thread list); everything else that went wrong is in the Snapshot's
// Notes, PtraceErr and each Thread's Err. A context cancelled midway
// (SIGINT, SIGTERM) ends the snapshot early with what was read; no thread
// is ever left stopped.
func Take(ctx context.Context, pid int, opts Options) (*model.Snapshot, error) {
	tk := &taker{pid: pid, opts: opts, log: opts.Logger}
	if tk.log == nil {
		tk.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return tk.take(ctx)
}

// taker holds the state of one Take.
type taker struct {
	// mu guards the taker's state: threads are read on several
	// goroutines, which let it go while they wait (for /proc, for a stop).
	mu   sync.Mutex
	pid  int
	opts Options
	log  *slog.Logger
	snap *model.Snapshot

	tg       *target.Process // nil: the process's memory could not be read
	ownTg    bool
	unw      *unwind.Process
	mem      unwind.Memory
	sym      *symbolize.Process
	ptrace   bool // stops still allowed
	isParent bool // our wait for the target would see its stops (package child)
	sched    bool // /proc/<pid>/task/<tid>/sched exists
	clock    *schedclock.Clock
	tids     map[int]bool
	kernel   map[int][]procfs.KernelFrame
	notes    map[string]bool
	denied   map[string]bool // /proc files of threads we may not read
	vanished int             // threads that exited while being read
	fds      []int           // descriptors threads wait on, resolved at the end

	book    *StopBook
	key     bookKey
	stops   []stopped        // threads stopped, as they were before
	carried map[int]stopMark // marks of threads read without a stop
	since   map[int]stopMark // each thread's off-CPU start and counts, before any stop
	// readings are those of the runtimes the target runs (runtimes.go).
	readings []runtimes.Reading
}

func (tk *taker) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if tk.notes[s] {
		return
	}
	tk.notes[s] = true
	tk.snap.Notes = append(tk.snap.Notes, s)
}

func (tk *taker) take(ctx context.Context) (*model.Snapshot, error) {
	pid := tk.pid
	st, err := procfs.ReadStatus(pid, pid)
	if err != nil {
		return nil, fmt.Errorf("snapshot of pid %d: %w", pid, err)
	}
	if st.Tgid != pid {
		return nil, fmt.Errorf("snapshot of pid %d: it is a thread of process %d; snapshot the process", pid, st.Tgid)
	}
	start := time.Now()
	tk.snap = &model.Snapshot{PID: pid, Time: start, Mono: monotime.Now()}
	tk.notes = map[string]bool{}
	tk.kernel = map[int][]procfs.KernelFrame{}
	tk.denied = map[string]bool{}
	tk.snap.Command, _ = procfs.Cmdline(pid)
	tk.isParent = child.StopSeenByWait(pid, st.PPid)
	tk.book = tk.opts.Stops
	if tk.book == nil {
		tk.book = processStops
	}
	tk.key, _ = keyOf(pid)
	tk.carried, tk.since = map[int]stopMark{}, map[int]stopMark{}
	tk.sched = hasSchedFile(pid)
	tk.clock = schedclock.New()
	tk.prepare()
	defer tk.closeTarget()

	tids, err := procfs.Threads(pid)
	if err != nil {
		return nil, fmt.Errorf("snapshot of pid %d: threads: %w", pid, err)
	}
	tk.tids = make(map[int]bool, len(tids))
	for _, tid := range tids {
		tk.tids[tid] = true
	}
	threads, exited, unread := tk.threads(ctx, tids)
	tk.snap.Threads = threads
	if unread > 0 {
		tk.note("snapshot cut short (%v): %d of %d threads not read", context.Cause(ctx), unread, len(tids))
	}
	tk.resolveFDs()
	tk.finish(tids, exited)
	tk.snap.Duration = time.Since(start)
	if tk.key.Start != 0 {
		tk.book.set(tk.key, marksAfter(pid, tk.stops, tk.carried))
	}
	return tk.snap, nil
}

// threads reads the threads, in order, on several goroutines at once
// (one only where a runtime's frames are read under the stops: those
// readers keep caches for one reader at a time): most of a thread's
// reading is waiting, for /proc's files and for the thread to come to its
// stop, so the next threads are read meanwhile. Each thread's own stop
// is as brief as alone. exited counts the threads gone before anything
// was read; unread those a cancelled ctx left unread.
func (tk *taker) threads(ctx context.Context, tids []int) (threads []model.Thread, exited, unread int) {
	workers := snapshotWorkers
	if len(tk.readings) > 0 {
		workers = 1
	}
	out := make([]model.Thread, len(tids))
	read := make([]bool, len(tids))
	done := make([]bool, len(tids))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, len(tids)) {
		wg.Go(func() {
			var bufs workerBufs
			for {
				i := int(next.Add(1) - 1)
				if i >= len(tids) || ctx.Err() != nil {
					return
				}
				out[i], read[i] = tk.thread(tids[i], &bufs)
				done[i] = true
			}
		})
	}
	wg.Wait()
	threads = out[:0]
	for i := range tids {
		switch {
		case !done[i]:
			unread++
		case !read[i]:
			exited++
		default:
			threads = append(threads, out[i])
		}
	}
	return threads, exited, unread
}

// snapshotWorkers is how many threads a snapshot reads at once: one a
// CPU of a small machine. More read faster on an idle host, and make the
// stops longer on a loaded one, where the tracers wait for each other's
// CPUs.
const snapshotWorkers = 2

// prepare gets what is known of the target (made before any stop: the
// maps are read and files parsed there, which must not lengthen a stop)
// and decides whether stops are possible.
func (tk *taker) prepare() {
	tk.tg = tk.opts.Target
	if tk.tg == nil {
		var err error
		tk.tg, err = target.Open(tk.pid, target.Options{Kernel: true, JIT: true, Logger: tk.opts.Logger})
		switch {
		case err == nil:
			tk.ownTg = true
		case perms.IsPermission(err) && !tk.opts.NoPtrace:
			tk.snap.PtraceErr = explainRefusal(tk.pid, tk.pid, unwrapErrno(err))
			tk.note("not permitted to read the process's memory (%v): no user stacks, /proc facts only", tk.snap.PtraceErr)
		default:
			tk.note("user stacks and names unavailable: %v", err)
		}
	}
	if tk.tg != nil {
		tk.unw, tk.sym, tk.mem = tk.tg.Unwinder(), tk.tg.Symbols(), tk.tg.Memory()
		for _, p := range tk.unw.Problems() {
			tk.note("unwinding: %s", p)
		}
		tk.beginReadings()
		if tk.ownTg {
			for _, n := range tk.tg.Notes() {
				tk.note("%s", n)
			}
		}
	} else {
		tk.mem = noMemory{}
	}
	switch {
	case tk.opts.NoPtrace:
	case !ptraceSupported:
		tk.note("user stacks are read without ptrace stops on this architecture")
	case tk.unw == nil:
	default:
		tk.ptrace = true
		if err := processRefusal(tk.pid); err != nil {
			tk.ptrace = false
			tk.snap.PtraceErr = err
			tk.note("no ptrace stops: %v", err)
		}
	}
	if !tk.sched {
		if tk.opts.OffCPUSince != nil {
			tk.note("off-CPU times come from the sampler (/proc/<pid>/task/<tid>/sched is absent: the kernel lacks CONFIG_SCHED_DEBUG)")
		} else {
			tk.note("how long threads have been off the CPU is unknown: /proc/<pid>/task/<tid>/sched is absent (the kernel lacks CONFIG_SCHED_DEBUG) and no sampler was running")
		}
	}
}

func (tk *taker) closeTarget() {
	if tk.ownTg {
		tk.tg.Close()
	}
}

// noMemory is the memory of a process we may not read.
type noMemory struct{}

func (noMemory) ReadAt(p []byte, addr uint64) (int, error) {
	return 0, fmt.Errorf("read %#x: the process's memory is not readable", addr)
}

// workerBufs are a worker's buffers, reused for every thread it reads:
// one for its /proc files, one for the copy of a stack.
type workerBufs struct {
	proc [taskBufSize]byte
	dump [stackCopy]byte
}

// thread reads one thread; ok is false when it exited before anything
// could be read.
func (tk *taker) thread(tid int, bufs *workerBufs) (model.Thread, bool) {
	t := model.Thread{TID: tid}
	f, err := openTask(tk.pid, tid, bufs.proc[:])
	if err != nil {
		return t, false
	}
	defer f.close()
	var sc procfs.Syscall
	var ss procfs.Schedstat
	denied := map[string]bool{}
	st, err := readFacts(f, &t, &sc, &ss, denied)
	var kf []procfs.KernelFrame
	var kerr error
	if err == nil {
		kf, kerr = readKernel(f, &t, denied)
	}
	tk.mu.Lock()
	for what := range denied {
		tk.denied[what] = true
	}
	tk.mu.Unlock()
	if err != nil {
		return t, false
	}
	var fds []int
	if t.Syscall != nil {
		t.Wait, fds = describe(t.Syscall, tk.mem, linkNamer(tk.pid))
		if t.Syscall.Nr == sysFutex {
			t.Wait = futexWaitOf(&t, tk.mem, tk.tids)
		}
	} else if t.State == 'D' && t.Wchan != "" {
		t.Wait = &model.Wait{Kind: "kernel", Desc: "the kernel (uninterruptible sleep in " + t.Wchan + ")"}
	}
	off := tk.readSchedOffCPU(&t, f)
	tk.mu.Lock()
	tk.fds = append(tk.fds, fds...)
	tk.offCPU(&t, off)
	switch {
	case kerr == nil:
		tk.kernel[tid] = kf
	case perms.IsPermission(kerr):
		tk.denied["stack"] = true
	case !errors.Is(kerr, procfs.ErrGone):
		tk.note("kernel stack of thread %d: %v", tid, kerr)
	}
	tk.mu.Unlock()
	tk.userStack(&t, f, st, ss, sc, bufs.dump[:])
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if m, ok := tk.since[tid]; ok {
		if t.Stopped {
			tk.stops = append(tk.stops, stopped{tid: tid, since: m.Since, vol: m.Vol, invol: m.Invol})
			delete(tk.carried, tid) // the stop makes its mark anew
		} else if _, fromMark := tk.carried[tid]; fromMark {
			tk.carried[tid] = m // still blocked since then, and still unstopped
		}
	}
	if t.Stopped && t.Stop > tk.snap.MaxStop {
		tk.snap.MaxStop = t.Stop
	}
	return t, true
}

// schedOffCPU is when a sleeping thread left the CPU by the kernel's
// accounting (ok: the kernel keeps it, and it is not later than now, the
// time it was asked at).
type schedOffCPU struct {
	now, since uint64
	ok         bool
}

// readSchedOffCPU reads a sleeping thread's schedOffCPU without the
// taker's lock: its two /proc files are a quarter of a thread's reading,
// which the other workers waited out while it was read under the lock.
func (tk *taker) readSchedOffCPU(t *model.Thread, f *taskFiles) schedOffCPU {
	r := schedOffCPU{now: monotime.Now()}
	if t.State == 'R' || !tk.sched {
		return r
	}
	at, ok := schedSleepStart(tk.clock, f)
	r.since, r.ok = at, ok && at <= r.now
	return r
}

// offCPU fills how long a sleeping thread has been off the CPU: from the
// kernel's accounting (sched) or the sampler, unless an earlier
// snapshot's stop reset both and the thread has stayed blocked since
// (stops.go).
func (tk *taker) offCPU(t *model.Thread, sched schedOffCPU) {
	if t.State == 'R' {
		return
	}
	now := sched.now
	var since uint64
	switch {
	case sched.ok:
		since = sched.since
		t.OffCPUSource = "sched"
	case tk.opts.OffCPUSince != nil && tk.samplerSince(t, now, &since):
		t.OffCPUSource = "sampler"
	}
	if earlier, ok := tk.book.since(tk.key, t.TID, t.VoluntarySwitches, t.InvoluntarySwitches); ok && earlier <= now && (since == 0 || earlier < since) {
		since = earlier
		t.OffCPUSource = strings.TrimPrefix(t.OffCPUSource+", ", ", ") + "blocked since before an earlier stallwatch stop"
		tk.carried[t.TID] = stopMark{}
	}
	if since == 0 {
		return
	}
	t.OffCPUFor, t.OffCPUKnown = time.Duration(now-since), true
	tk.since[t.TID] = stopMark{Since: since, Vol: t.VoluntarySwitches, Invol: t.InvoluntarySwitches}
}

func (tk *taker) samplerSince(t *model.Thread, now uint64, since *uint64) bool {
	at, ok := tk.opts.OffCPUSince(t.TID)
	if ok && at <= now {
		*since = at
	}
	return ok && at <= now
}

// userStack reads the thread's user stack: under a brief ptrace stop
// when allowed and possible, otherwise without a stop from /proc.
func (tk *taker) userStack(t *model.Thread, f *taskFiles, st procfs.Status, ss procfs.Schedstat, sc procfs.Syscall, dump []byte) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if tk.unw == nil {
		t.Unwinder = "none"
		return
	}
	stop := tk.ptrace
	switch {
	case !stop:
	case t.State == 'Z' || t.State == 'X':
		t.Unwinder = "none"
		return
	case st.TracerPid != 0 && !tracedByUs(st):
		stop = false
		t.Err = errors.Join(t.Err, tracedError(t.TID, st.TracerPid))
	case t.State == 'D':
		// It would stop only when it leaves the uninterruptible sleep;
		// meanwhile its registers are saved and its stack is still.
		stop = false
	case t.TID == tk.pid && tk.isParent:
		// Our own wait for the target would take the stop for the
		// child stopping (package child): read it without one.
		stop = false
		tk.note("thread %d (main thread) was read without a stop: stallwatch is the target's parent, and would see the stop as its child stopping", t.TID)
	}
	if stop && !tk.opts.stopSleepers && len(tk.readings) == 0 && asleepInSyscall(st, sc) {
		// The stop needs nothing of the taker's (see below).
		tk.mu.Unlock()
		res := readAsleep(f, st, ss, sc, dump, tk.unw, tk.tg.Memory(), maxFrames)
		tk.mu.Lock()
		if res.why == asleepRead {
			t.UserAddrs, t.UserExact, t.UserCut = res.trace.PCs, res.trace.Exact, res.trace.Cut
			t.Unwinder = res.trace.Methods() + " (no stop)"
			return
		}
	}
	if stop {
		var during func(unwind.Regs, unwind.Trace)
		if len(tk.readings) > 0 {
			during = func(regs unwind.Regs, tr unwind.Trace) { tk.readStopped(t.TID, true, regs, tr) }
		}
		// The stop needs nothing of the taker's but the runtimes'
		// readers, which run one thread at a time (see threads).
		if during == nil {
			tk.mu.Unlock()
		}
		res := stopThread(tk.pid, t.TID, tk.unw, tk.tg.Memory(), maxFrames, during, tk.opts.walkStopped)
		if res.walkedAfter && res.err == nil && !res.exited && shortOfStart(res.trace.Cut) {
			// Walked in its copy alone, after the stop: again, walked
			// under the stop (see stopThread).
			again := stopThread(tk.pid, t.TID, tk.unw, tk.tg.Memory(), maxFrames, nil, true)
			if again.err == nil || again.exited {
				again.stop, again.held = max(again.stop, res.stop), max(again.held, res.held)
				res = again
			}
		}
		if during == nil {
			tk.mu.Lock()
		}
		switch {
		case res.exited:
			t.Err = errors.Join(t.Err, model.ErrExited)
			tk.vanished++
			return
		case res.err != nil && perms.IsPermission(res.err) && !res.abandoned:
			tk.refused(t, res.err)
		case res.err != nil:
			tk.note("thread %d: %v; read without a stop instead", t.TID, res.err)
		default:
			t.UserAddrs, t.UserExact, t.UserCut = res.trace.PCs, res.trace.Exact, res.trace.Cut
			t.Unwinder = res.trace.Methods()
			t.Stopped, t.Stop, t.StopHeld = true, res.stop, res.held
			tk.snap.PtraceUsed = true
			switch res.kind {
			case stopGroup:
				tk.note("the process is stopped by a signal (state T); it was left stopped")
			case stopSignal:
				tk.note("thread %d had signal %v arriving when it was stopped; the signal was delivered at detach", t.TID, res.sig)
			}
			return
		}
	}
	// Without a stop: a blocked thread's frames stand still; a running
	// one's may change while they are read.
	if sc.Running {
		tk.readStopped(t.TID, false, unwind.Regs{}, unwind.Trace{})
		t.Unwinder = "none"
		t.Err = errors.Join(t.Err, model.ErrRunning)
		return
	}
	tr, err := tk.unw.BlockedTrace(t.TID, maxFrames)
	tk.readStopped(t.TID, false, unwind.Regs{}, tr)
	if err != nil {
		t.Unwinder = "none"
		t.Err = errors.Join(t.Err, fmt.Errorf("user stack: %w", err))
		return
	}
	t.UserAddrs, t.UserExact, t.UserCut = tr.PCs, tr.Exact, tr.Cut
	t.Unwinder = tr.Methods()
	if t.Unwinder != "pc only" {
		t.Unwinder += " (no stop)"
	}
}

// refused handles a PTRACE_SEIZE the kernel refused: a thread another
// tracer took meanwhile is read without a stop, alone; any other refusal
// holds for every thread, which are then all read without stops.
func (tk *taker) refused(t *model.Thread, errno error) {
	if st, err := procfs.ReadStatus(tk.pid, t.TID); err == nil && st.TracerPid != 0 && !tracedByUs(st) {
		t.Err = errors.Join(t.Err, tracedError(t.TID, st.TracerPid))
		return
	}
	tk.ptrace = false
	tk.snap.PtraceErr = explainRefusal(tk.pid, t.TID, unwrapErrno(errno))
	tk.note("ptrace refused: user stacks read without stops from /proc (%v)", tk.snap.PtraceErr)
}

// finish: threads that came or went, the process's exit, names, the lock
// graph.
func (tk *taker) finish(tids []int, exited int) {
	snap := tk.snap
	if len(tk.denied) > 0 {
		var files []string
		for f := range tk.denied {
			files = append(files, f)
		}
		sort.Strings(files)
		err := explainRefusal(tk.pid, tk.pid, unix.EACCES)
		tk.note("not shown, not permitted: /proc/%d/task/*/{%s}: %v", tk.pid, strings.Join(files, ","), err)
	}
	if exited > 0 {
		tk.note("%d threads exited before they could be read", exited)
	}
	if !tk.alive(exited+tk.vanished > 0) {
		snap.TargetExited = true
		tk.note("the process exited during the snapshot: %d of %d threads were read", len(snap.Threads), len(tids))
	} else if now, err := procfs.Threads(tk.pid); err == nil {
		born := 0
		for _, tid := range now {
			if !tk.tids[tid] {
				born++
			}
		}
		if born > 0 {
			tk.note("%d threads started during the snapshot and are not in it", born)
		}
	}
	tk.name()
	for i := range snap.Threads {
		t := &snap.Threads[i]
		if t.Wait != nil && t.Wait.Addr != 0 {
			names := make([]string, 0, len(t.User))
			for _, l := range t.User {
				for _, ln := range l.Lines {
					names = append(names, ln.Function)
				}
			}
			refineByStack(t.Wait, names)
		}
	}
	// After the waits are refined by their native stacks: a runtime's
	// wait (a GIL, a Java monitor) is what the runtime says.
	tk.applyReadings()
	snap.Locks = model.BuildLockGraph(snap.Threads)
	sort.SliceStable(snap.Threads, func(i, j int) bool { return snap.Threads[i].TID < snap.Threads[j].TID })
}

// alive reports whether the process still lives. When threads vanished
// during the snapshot the process may be on its way out (a group exit
// kills its threads one by one): give it a moment to show it.
func (tk *taker) alive(threadsVanished bool) bool {
	if !threadsVanished {
		return procfs.Alive(tk.pid)
	}
	return !eventuallyDead(tk.pid, 200*time.Millisecond)
}

// name resolves every frame.
func (tk *taker) name() {
	for i := range tk.snap.Threads {
		t := &tk.snap.Threads[i]
		for _, kf := range tk.kernel[t.TID] {
			if tk.sym != nil {
				t.Kernel = append(t.Kernel, tk.sym.LocateKernelFrame(kf))
			} else {
				t.Kernel = append(t.Kernel, unnamed(kf.Addr, kf.Symbol))
			}
		}
		for j, pc := range t.UserAddrs {
			exact := j == 0 || j < len(t.UserExact) && t.UserExact[j]
			if tk.sym == nil {
				t.User = append(t.User, unnamed(pc, ""))
				continue
			}
			l := tk.sym.Locate(symbolize.Addr{PC: pc, Time: tk.snap.Mono, Return: !exact})
			t.User = append(t.User, l)
			if symbolize.Outermost(l) {
				// Nothing called a thread's first function: what a
				// scan found beyond it is stale memory.
				t.UserAddrs = t.UserAddrs[:j+1]
				t.UserCut = unwind.Cut{}
				break
			}
		}
		if tk.sym != nil && len(t.User) > 0 {
			t.User = tk.sym.EndStack(t.User, t.UserCut)
		}
	}
}

// unnamed is a frame when no symbolizer could be made.
func unnamed(pc uint64, name string) *model.Location {
	if name == "" {
		name = fmt.Sprintf("[unknown] %#x", pc)
	}
	return &model.Location{Addr: pc, Lines: []model.Line{{Function: name}}}
}

func unwrapErrno(err error) error {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return err
}

// eventuallyDead polls until pid is gone or a zombie, for at most d.
func eventuallyDead(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(5 * time.Millisecond) {
		if !procfs.Alive(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
