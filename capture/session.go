package capture

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
	"github.com/stallwatch/stallwatch/runtimes"
	"github.com/stallwatch/stallwatch/sampler"
	"github.com/stallwatch/stallwatch/snapshot"
	"github.com/stallwatch/stallwatch/target"
)

// Session watches one target between captures: it keeps the flight
// recorder running at the baseline rate and what symbolization and
// unwinding learnt of the target, so that a capture starts at once.
type Session struct {
	cfg  Config
	tg   model.Target
	root *capdir.Root    // cfg.Out, held open
	tp   *target.Process // what is known of the target, kept across captures
	// unwind is how samples are unwound: Config.Unwind, auto decided.
	unwind UnwindMode
	smp    *sampler.Sampler
	// plan fits the target's threads into the file descriptors
	// stallwatch may open (package doc, "Descriptors").
	plan sampler.FDPlan
	// notes are facts found at Open that every capture reports.
	notes []string
	// annot reads the runtime frames of the samples (a CPython
	// target's Python frames: runtimes.Sampled); nil for other targets.
	annot runtimes.Annotator
	// jvm is what is kept of a JVM target (its attach client); nil for
	// any other.
	jvm *jvmSession
	// kw reads the target's kernel context.
	kw *kernelWatch

	mu sync.Mutex // one capture at a time
	// capturing is when the capture in progress began sampling
	// (CLOCK_MONOTONIC ns; 0: none): what it will resolve must not be
	// forgotten (Forget's horizon).
	capturing atomic.Uint64
	// mapsRead is when a sample last made the maps be read again
	// (rereadMaps; CLOCK_MONOTONIC ns).
	mapsRead atomic.Uint64

	// periods is continuous profiling's (Config.Profile; period.go).
	periods periods
	rest    rates
}

// Open starts watching cfg.PID: the output directory is opened (and
// refused now, not at the first stall, when it is unsafe or unwritable),
// symbol sources are found and, unless cfg.NoFlightRecorder, the flight
// recorder starts sampling.
//
// A target that exits before its session is open is
// model.ErrTargetExited, whatever reading found it gone.
func Open(cfg Config) (*Session, error) {
	s, err := open(cfg)
	if errors.Is(err, procfs.ErrGone) {
		return nil, fmt.Errorf("pid %d: %w", cfg.PID, model.ErrTargetExited)
	}
	return s, err
}

func open(cfg Config) (*Session, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	root, err := capdir.OpenRoot(cfg.Out)
	if err != nil {
		return nil, err
	}
	s, err := newSession(cfg, root)
	if err != nil {
		root.Close()
		return nil, err
	}
	if (s.cfg.BaselineFreq > 0 || s.cfg.Profile) && s.canSample() {
		history := cfg.History
		if s.cfg.BaselineFreq == 0 {
			history = -1 // sampling for the periods alone
		}
		freq, offCPU := s.cfg.restRate()
		s.rest.freq, s.rest.offCPU = freq, offCPU
		s.smp, err = sampler.Start(s.samplerConfig(freq, offCPU, history))
		if sampler.IsDescriptorShortage(err) {
			// Captures can still be written: a snapshot, and what a
			// capture's own sampler gets then.
			s.cfg.Logger.Warn("no flight recorder and no continuous profile: out of file descriptors; captures will have no history", "err", err)
			s.notes = append(s.notes, "no flight recorder (no samples from before the trigger): "+err.Error())
			s.smp, err = nil, nil
		}
		if err != nil {
			s.tp.Close()
			root.Close()
			return nil, err
		}
	}
	if s.smp != nil {
		s.kw.every(s.cfg.History)
	}
	if s.cfg.Profile {
		s.startPeriods()
	}
	return s, nil
}

// planDescriptors raises RLIMIT_NOFILE to its hard limit and fits the
// target's threads into it, once, at start-up: a shortfall is warned
// about now with the numbers and the fix, and the session samples less
// (fewer events per thread, then a subset of the threads) instead of
// running out at the stall. Every capture's capture.json says so.
func (s *Session) planDescriptors() {
	plan, err := sampler.PlanFDs(s.cfg.PID, !s.cfg.NoOffCPU, 0)
	if err != nil {
		s.cfg.Logger.Debug("planning file descriptors", "err", err)
		return
	}
	s.plan = plan
	if sum := plan.Summary(); sum != "" {
		s.cfg.Logger.Warn("too few file descriptors to sample every thread as asked: sampling less",
			"threads", plan.Threads, "need", plan.Need(), "limit", plan.Limit, "hard_limit", plan.HardLimit,
			"events_per_thread", plan.PerThread, "threads_sampled", min(plan.MaxThreads, plan.Threads), "detail", sum)
		s.notes = append(s.notes, sum)
	}
	if plan.DroppedOffCPU {
		s.cfg.NoOffCPU = true // capture.json's settings say what ran
	}
}

// newSession opens what is known of the target.
func newSession(cfg Config, root *capdir.Root) (*Session, error) {
	s := &Session{cfg: cfg, tg: readTarget(cfg.PID), root: root, kw: newKernelWatch(cfg.PID, cfg.Logger.Debug)}
	var err error
	s.tp, err = target.Open(cfg.PID, target.Options{Kernel: !cfg.NoKernel, JIT: true, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("symbol sources: %w", err) // target.Open names the pid
	}
	s.notes = s.tp.Notes()
	s.openAnnotator()
	s.jvm = newJVMSession(s.tp)
	s.planDescriptors()
	s.unwind = s.cfg.Unwind
	if s.unwind == UnwindAuto {
		s.unwind = autoUnwind(s.tp)
	}
	return s, nil
}

// autoUnwind picks the unwinding of UnwindAuto for a target: frame
// pointers when every file of code it maps is a Go binary (Go keeps frame
// pointers, and its tables unwind exactly without a copy), CFI otherwise.
func autoUnwind(tp *target.Process) UnwindMode {
	files := 0
	for _, m := range tp.Space().Modules() {
		if !m.IsFile() || m.Gone {
			continue
		}
		files++
		if m.File == nil {
			return UnwindCFI
		}
		if g, err := m.File.Go(); err != nil || g == nil {
			return UnwindCFI
		}
	}
	if files == 0 {
		return UnwindCFI
	}
	return UnwindFP
}

// userStack unwinds a sample's user stack as it arrives (see
// sampler.Config.UserStack). A return address in no executable mapping
// may be in code mapped since the maps were read — a JIT's new code
// pages: V8 commits its code space page by page, and a target started
// by `watch -- CMD` maps all of it after its session opened —, and
// between captures nothing else reads them until the period's end: so
// such a stop has them read again, beside the sampler (four times a
// second at most, mapsReread), for the samples that follow.
func (s *Session) userStack(us sampler.UserSample, dst []uint64) ([]uint64, unwind.Cut) {
	stack, cut := s.tp.Unwinder().UnwindSample(unwindSample(us), unwind.MaxFrames, dst)
	if cut.Reason == unwind.NotExecutable {
		s.rereadMaps()
	}
	return stack, cut
}

// mapsReread bounds how often samples have the target's maps read again
// (userStack): a return address that is truly in no code (a frame
// pointer the program uses as a register) costs four reads of the maps
// a second, not one a sample, and a read that finds them unchanged
// keeps the unwinder's caches.
const mapsReread = 250 * time.Millisecond

// rereadMaps reads the target's maps again for the unwinder, off the
// sampler's reading (its records wait for no file), unless that was
// asked for less than mapsReread ago.
func (s *Session) rereadMaps() {
	now := monotime.Now()
	last := s.mapsRead.Load()
	if now-last < uint64(mapsReread) || !s.mapsRead.CompareAndSwap(last, now) {
		return
	}
	go func() {
		if s.tp.Space().Refresh() == nil {
			s.tp.Unwinder().Refresh()
		}
	}()
}

// unwindSample is what the unwinder needs of a sample.
func unwindSample(us sampler.UserSample) unwind.Sample {
	return unwind.Sample{Regs: unwind.Regs{IP: us.Regs.IP, SP: us.Regs.SP, BP: us.Regs.BP, BPKnown: true},
		Stack: us.Stack, Asked: us.Asked, FP: us.FP, Time: us.Time}
}

// samplerConfig is the sampler's configuration at a rate; history < 0 turns
// its flight recorder off.
func (s *Session) samplerConfig(freq int, offCPU bool, history time.Duration) sampler.Config {
	c := sampler.Config{
		PID:     s.cfg.PID,
		Freq:    freq,
		OffCPU:  offCPU,
		Kernel:  !s.cfg.NoKernel,
		History: history,
		Logger:  s.cfg.Logger,

		// Rings are sized for the capture's rate, which SetRate raises
		// the flight recorder's to.
		PeakFreq:   s.cfg.Freq,
		PeakOffCPU: !s.cfg.NoOffCPU,

		BlockedStack: s.tp.Unwinder().BlockedStack,
		MaxThreads:   s.plan.MaxThreads,
		FoldTracker:  s.plan.FoldTracker,
		UserStack:    s.userStack,
	}
	if s.annot != nil {
		c.Annotate, c.PromptWakeup = s.annot.Annotate, true
	}
	if s.unwind == UnwindCFI {
		start, ceiling := s.cfg.stackCopy()
		c.DumpOnCPU, c.DumpOffCPU, c.GrowStackCopy = start, start, ceiling
	} else {
		c.DumpOnCPU, c.DumpOffCPU = FramePointerCopy, FramePointerCopy
	}
	return c
}

// canSample reports whether the descriptor plan leaves room to sample
// any thread.
func (s *Session) canSample() bool { return s.plan.Threads == 0 || s.plan.MaxThreads > 0 }

// Capture samples the target at cfg.Freq for cfg.CaptureFor, snapshots its
// threads at the trigger, adds the flight recorder's last cfg.History, and
// writes the capture directory. A cancelled ctx or the target's exit cuts
// the capture short; what was collected is still written. A part that
// fails costs only itself: sampling that cannot start or cannot be raised
// (out of file descriptors, say) leaves the snapshot and whatever sampling
// did run, with a note in capture.json saying what was lost and why.
func (s *Session) Capture(ctx context.Context, tr model.Trigger) (*model.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tr.Mono == 0 {
		tr.Mono, tr.At = monotime.Now(), time.Now()
	}
	var lost []string
	smp := s.smp
	ask := s.jvm.askPerfMap(ctx)
	if !s.canSample() {
		return s.snapshotOnly(ctx, tr, ask, "no samples: too few file descriptors for even one thread (the note above has the numbers and the fix)", true)
	}
	if smp == nil {
		var err error
		if smp, err = sampler.Start(s.samplerConfig(s.cfg.Freq, !s.cfg.NoOffCPU, -1)); err != nil {
			s.cfg.Logger.Warn("capture: sampling could not start; writing the snapshot alone", "err", err)
			return s.snapshotOnly(ctx, tr, ask, "no samples: the sampler could not start: "+err.Error(), false)
		}
		defer smp.Close()
	}
	// The recording begins before the rate is raised and ends after it
	// is lowered, so that every sample taken at the capture's rate is the
	// capture's (a continuous profile's period holds the capture's
	// samples, and at its rate those only).
	rec := smp.StartRecording()
	if smp == s.smp {
		if err := s.raise(); err != nil {
			// What could not be raised is said; the rest samples on.
			s.cfg.Logger.Warn("capture: raising the sampling rate failed in part; capturing what runs", "err", err)
			lost = append(lost, "raising the sampling rate for the capture: "+err.Error())
		}
	}
	kStart := s.kw.readAsync(true)
	s.capturing.Store(rec.Start())
	defer s.capturing.Store(0)
	// The target may have loaded code since the last capture: the
	// snapshot must know it before it stops a thread there.
	if err := s.tp.Refresh(); err != nil {
		s.cfg.Logger.Debug("refreshing what is known of the target", "err", err)
	}
	snap := s.startSnapshot(ctx, smp.OffCPUSince)
	cutWhy := waitFor(ctx, s.cfg.CaptureFor, smp.Done())
	if smp == s.smp {
		if err := s.lower(); err != nil {
			s.cfg.Logger.Warn("lowering the sampling rate back to the baseline", "err", err)
		}
	}
	during := rec.Stop()
	kr := kernelReadings{start: kStart(), end: s.kw.readAsync(true)}
	var before []sampler.Sample
	if smp == s.smp {
		from := rec.Start() - min(rec.Start(), uint64(s.cfg.History))
		before = smp.History(from, rec.Start())
		kr.base = s.kw.since(from)
	}
	f := &facts{cfg: s.cfg, tg: s.tg, trigger: tr, stats: rec.Stats(), cutWhy: cutWhy, notes: slices.Concat(s.notes, lost), exited: !procfs.Alive(s.cfg.PID),
		kernel: kr, profile: s.periods.profileRef()}
	f.snap = snap()
	f.addNote(s.jvm.javaThreads(ctx, f.snap))
	f.addNote(s.jvm.jitNames(ask))
	res, err := s.finish(f, smp, rec, []window{{model.PhaseBefore, before}, {model.PhaseDuring, during}})
	if smp == s.smp {
		dir := ""
		if res != nil {
			dir = res.Dir
		}
		s.periods.captured(rec.Start(), rec.End(), s.cfg.Freq, dir)
	}
	return res, err
}

// rates is the session sampler's rate between captures, which the
// daemon's budget may change while a capture runs.
type rates struct {
	mu     sync.Mutex
	freq   int
	offCPU bool
	raised bool // a capture samples at its own rate now
}

// raise puts the session's sampler at the capture's rate.
func (s *Session) raise() error {
	s.rest.mu.Lock()
	defer s.rest.mu.Unlock()
	s.rest.raised = true
	return s.smp.SetRate(s.cfg.Freq, !s.cfg.NoOffCPU)
}

// lower puts it back at the rate between captures.
func (s *Session) lower() error {
	s.rest.mu.Lock()
	defer s.rest.mu.Unlock()
	s.rest.raised = false
	return s.smp.SetRate(s.rest.freq, s.rest.offCPU)
}

// restRate is the sampler's rate between captures.
func (s *Session) restRate() (int, bool) {
	s.rest.mu.Lock()
	defer s.rest.mu.Unlock()
	return s.rest.freq, s.rest.offCPU
}

// SetProfileRate changes the continuous profile's rate (and its off-CPU
// sampling, which Config.NoOffCPU keeps off) from now on, without a gap:
// the daemon's budget lowers it when profiling costs more than the host
// allows, and raises it again. A capture in progress keeps its own rate
// and comes back to this one. The flight recorder's rate stays the floor.
func (s *Session) SetProfileRate(freq int, offCPU bool) error {
	if !s.cfg.Profile || s.smp == nil {
		return ErrNotProfiling
	}
	s.rest.mu.Lock()
	defer s.rest.mu.Unlock()
	s.rest.freq, s.rest.offCPU = max(s.cfg.BaselineFreq, freq), offCPU && !s.cfg.NoOffCPU
	if s.rest.raised {
		return nil
	}
	return s.smp.SetRate(s.rest.freq, s.rest.offCPU)
}

// snapshotOnly writes a capture that has the thread snapshot and no
// samples, with why in its notes; overBudget: no thread had room in the
// descriptor plan, so every thread counts as unsampled.
func (s *Session) snapshotOnly(ctx context.Context, tr model.Trigger, ask *perfMapAsk, why string, overBudget bool) (*model.Result, error) {
	f := &facts{cfg: s.cfg, tg: s.tg, trigger: tr, notes: slices.Concat(s.notes, []string{why}), exited: !procfs.Alive(s.cfg.PID),
		profile: s.periods.profileRef()}
	f.addNote(s.jvm.jitNames(ask))
	if err := s.tp.Refresh(); err != nil {
		s.cfg.Logger.Debug("refreshing what is known of the target", "err", err)
	}
	kStart := s.kw.readAsync(true)
	f.snap = s.startSnapshot(ctx, nil)()
	f.kernel = kernelReadings{base: s.kw.since(tr.Mono - min(tr.Mono, uint64(s.cfg.History))), start: kStart(), end: s.kw.readAsync(true)}
	f.addNote(s.jvm.javaThreads(ctx, f.snap))
	if f.snap != nil && overBudget {
		f.stats.ThreadsOverBudget = len(f.snap.Threads)
	}
	f.start, f.end = tr.At, time.Now()
	if f.snap != nil {
		f.start = f.snap.Time
		f.end = f.snap.Time.Add(max(f.snap.Duration, time.Nanosecond))
		f.exited = f.exited || f.snap.TargetExited
	}
	return f.write(s.root)
}

// startSnapshot takes the thread snapshot concurrently with the sampling
// that has just begun; the returned function waits for it.
func (s *Session) startSnapshot(ctx context.Context, offCPUSince func(int) (uint64, bool)) func() *model.Snapshot {
	if !s.cfg.Snapshot {
		return func() *model.Snapshot { return nil }
	}
	done := make(chan *model.Snapshot, 1)
	go func() {
		snap, err := snapshot.Take(ctx, s.cfg.PID, snapshot.Options{
			NoPtrace:    s.cfg.NoPtrace,
			Target:      s.tp,
			OffCPUSince: offCPUSince,
			Unread:      s.jvm.unread(),
			Logger:      s.cfg.Logger,
		})
		if err != nil {
			s.cfg.Logger.Warn("thread snapshot", "err", err)
			if snap == nil {
				snap = &model.Snapshot{PID: s.cfg.PID, Time: time.Now(), Notes: []string{"no thread snapshot: " + err.Error()}}
			}
		}
		done <- snap
	}()
	return func() *model.Snapshot { return <-done }
}

// finish symbolizes the windows and writes the capture directory.
func (s *Session) finish(f *facts, smp *sampler.Sampler, rec *sampler.Recording, windows []window) (*model.Result, error) {
	if err := s.tp.Refresh(); err != nil && !f.stats.TargetExited {
		s.cfg.Logger.Debug("refreshing symbol sources", "err", err)
	}
	r := &resolver{tp: s.tp, names: threadNames(smp, f.snap), toWall: wallNow(), annot: s.annot}
	if err := f.resolve(r, windows); err != nil {
		return nil, err
	}
	if s.annot != nil {
		if n := s.annot.Note(); n != "" {
			f.notes = append(f.notes, n)
		}
		if r.mismatched > 0 {
			f.notes = append(f.notes, s.annot.MismatchNote(r.mismatched))
		}
	}
	f.cuts, f.userStacks, f.unwind = r.cuts, r.total, s.unwind
	f.copies = grownCopies(smp)
	f.before = len(windows[0].samples)
	start := rec.Start()
	if f.before > 0 {
		start = min(start, windows[0].samples[0].Time)
	}
	f.sampled = true
	f.start, f.end = monotime.ToTime(start), monotime.ToTime(rec.End())
	f.symStats = s.tp.Symbols().Stats()
	return f.write(s.root)
}

// Recovered records in a capture's capture.json that the stall it belongs
// to has ended, and how long it lasted, and renders its reports again.
func (s *Session) Recovered(res *model.Result, stall time.Duration) error {
	if res == nil || res.Dir == "" {
		return errors.New("capture: no capture directory to update")
	}
	now := time.Now()
	return s.root.Update(filepath.Base(res.Dir), func(i *model.Info) {
		i.Recovered = now
		i.StallLen = stall
	}, rerender)
}

// rerender renders a capture's reports again from its files and its
// changed capture.json.
func rerender(d *capdir.Dir) ([]capdir.File, error) {
	c, err := report.Load(context.Background(), d)
	if err != nil {
		return nil, err
	}
	return report.ReportFiles(c), nil
}

// Close stops the flight recorder and releases everything held on the
// target and the output directory.
func (s *Session) Close() error {
	s.kw.Close()
	var err error
	if s.smp != nil {
		err = s.smp.Close()
	}
	return errors.Join(err, s.jvm.close(), s.tp.Close(), s.root.Close())
}

// waitFor waits d, or less when ctx ends or the target exits; it returns
// why the wait was cut short, or "".
func waitFor(ctx context.Context, d time.Duration, exited <-chan struct{}) string {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return ""
	case <-exited:
		return whyExited
	case <-ctx.Done():
		return interrupted(ctx)
	}
}

// interrupted says why ctx ended, for a capture cut short. The watchdog
// cancels with model.ErrTargetExited when it sees the exit before the
// sampler does: the same reason as when the sampler sees it first.
func interrupted(ctx context.Context) string {
	c := context.Cause(ctx)
	switch {
	case errors.Is(c, model.ErrTargetExited):
		return whyExited
	case c != nil && !errors.Is(c, context.Canceled):
		return "interrupted: " + c.Error()
	}
	return "interrupted"
}

// whyExited is why a capture is cut short by its target's exit.
const whyExited = "the target exited"
