package capture

import (
	"fmt"
	"hash/maphash"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/stallwatch/stallwatch/analysis"
	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
	"github.com/stallwatch/stallwatch/runtimes"
	"github.com/stallwatch/stallwatch/sampler"
	"github.com/stallwatch/stallwatch/symbolize"
	"github.com/stallwatch/stallwatch/target"
)

// readTarget reads what is known of the process while it lives: after it
// exits a report still needs its command line.
func readTarget(pid int) model.Target {
	t := model.Target{PID: pid}
	t.Command, _ = procfs.Cmdline(pid)
	t.Executable, _ = procfs.Exe(pid)
	return t
}

// window is one phase of samples: the flight recorder's ("before") or the
// capture's ("during").
type window struct {
	phase   string
	samples []sampler.Sample
}

// resolver turns samples (their user stacks unwound as they arrived) into
// symbolized report samples, located per address (cached in symbolize),
// each stack that ends early ended by a pseudo-frame saying why; it counts
// why stacks end early.
type resolver struct {
	tp    *target.Process
	names map[int]string
	// toWall turns CLOCK_MONOTONIC nanoseconds into Unix nanoseconds
	// (end_timestamp_ns).
	toWall func(mono uint64) int64
	cuts   map[unwind.Cut]int // user stacks cut short, by why
	total  int                // samples with a user stack
	// annot puts the runtime frames read of each sample (a CPython
	// target's Python frames) into its stack; mismatched counts those
	// that did not fit their native stack.
	annot      runtimes.Annotator
	mismatched int
	// stacks are the stacks resolved so far, by their addresses: a
	// recording's 100,000 samples have a few thousand stacks, each
	// resolved once and shared by its samples, and numbered once in the
	// table they are built into (build).
	stacks stackMemo
	// lastTID and lastName are the thread of the sample before and its
	// name (named: they are set).
	lastTID  int32
	lastName string
	named    bool
}

// wallNow turns CLOCK_MONOTONIC nanoseconds into Unix nanoseconds by
// the offset between the clocks, read once now.
func wallNow() func(uint64) int64 {
	off := time.Now().UnixNano() - int64(monotime.Now())
	return func(mono uint64) int64 { return int64(mono) + off }
}

func (r *resolver) resolve(windows []window) []model.Sample {
	n := 0
	for _, w := range windows {
		n += len(w.samples)
	}
	out := make([]model.Sample, 0, n)
	for _, w := range windows {
		for i := range w.samples {
			s := &w.samples[i]
			ms := r.sample(w.phase, s)
			ms.Stack, _ = r.stack(s)
			out = append(out, ms)
		}
	}
	return out
}

// build resolves the windows' samples into a table of the capture's
// profile (SetTable), one at a time: each stack the memo knows is
// numbered in the table once (report.TableBuilder.Stack), at its first
// sample, and a label set asked for only where the sample before's does
// not do (sampleLabels), so that no sample's stack is looked up again by
// its slice and no slice of the samples is made only to be read back. It
// counts the samples on and off the CPU. A resolver builds one table.
func (r *resolver) build(windows []window, period int64) (tb *report.TableBuilder, on, off int, err error) {
	n := 0
	for _, w := range windows {
		n += len(w.samples)
	}
	tb = report.NewTableBuilder(period, n)
	for _, w := range windows {
		var labels sampleLabels
		for i := range w.samples {
			s := &w.samples[i]
			if s.Kind == sampler.OffCPU {
				off++
			} else {
				on++
			}
			set := labels.of(s, func() int32 {
				ms := r.sample(w.phase, s)
				return tb.Labels(&ms)
			})
			locs, memo := r.stack(s)
			id, err := r.tableStack(tb, locs, memo)
			if err != nil {
				return nil, 0, 0, err
			}
			if err := tb.AddWeight(id, set, 1, int64(s.Weight), r.toWall(s.End())); err != nil {
				return nil, 0, 0, err
			}
		}
	}
	return tb, on, off, nil
}

// sampleLabels is the label set of the sample before in one window: what
// its labels say (report.TableBuilder.Labels) is its thread, process and
// kind, alike over a run of one thread's samples, and asked of the table
// only where they change.
type sampleLabels struct {
	tid, pid  int32
	kind      sampler.Kind
	preempted bool
	set       int32 // plus one: 0 for none yet
}

// of is the label set of s: the one before's, or what set gives.
func (l *sampleLabels) of(s *sampler.Sample, set func() int32) int32 {
	if l.set == 0 || s.TID != l.tid || s.PID != l.pid || s.Kind != l.kind || s.Preempted != l.preempted {
		l.tid, l.pid, l.kind, l.preempted, l.set = s.TID, s.PID, s.Kind, s.Preempted, set()+1
	}
	return l.set - 1
}

// tableStack is the table's id of a sample's stack: the memo's, where it
// has one, numbered at its first sample.
func (r *resolver) tableStack(tb *report.TableBuilder, locs []*model.Location, memo *memoStack) (int32, error) {
	if memo != nil && memo.table > 0 {
		return memo.table - 1, nil
	}
	id, err := tb.Stack(locs)
	if err != nil {
		return 0, err
	}
	if memo != nil {
		memo.table = id + 1
	}
	return id, nil
}

// sample is a sampler's sample as the report reads it, but its stack.
func (r *resolver) sample(phase string, s *sampler.Sample) model.Sample {
	// The name of the thread of the sample before: a map lookup a sample
	// saved where one thread's samples come in a row.
	if s.TID != r.lastTID || !r.named {
		r.lastTID, r.lastName, r.named = s.TID, r.names[int(s.TID)], true
	}
	return model.Sample{
		TID:        int(s.TID),
		ThreadName: r.lastName,
		Phase:      phase,
		OffCPU:     s.Kind == sampler.OffCPU,
		Preempted:  s.Preempted,
		Count:      1,
		Nanos:      int64(s.Weight),
		EndNanos:   r.toWall(s.End()),
		PID:        int(s.PID),
	}
}

// stack resolves a sample's kernel frames, then its user frames, ending
// with why it was cut short. memo is the memo's entry for the stack, nil
// where it has none (its locations chosen by the sample's time, or
// Python frames put in).
func (r *resolver) stack(s *sampler.Sample) (out []*model.Location, memo *memoStack) {
	k := min(int(s.Kernel), len(s.Stack))
	annotated := r.annot != nil && len(s.Interp) > 0
	memo = r.stacks.get(s.Stack, k, s.Cut)
	if memo != nil {
		out = memo.locs
	} else {
		var timed bool
		out, timed = r.tp.Symbols().LocateSampleTimed(make([]*model.Location, 0, len(s.Stack)+1), s.Stack, k, s.Time, s.Cut)
		if !timed && !annotated {
			memo = r.stacks.put(s.Stack, k, s.Cut, out)
		}
	}
	if annotated {
		memo = nil
		var mismatch bool
		if out, mismatch = r.annot.Splice(out, s.Interp); mismatch {
			r.mismatched++
		}
	}
	if len(out) > k {
		r.total++
		if last := out[len(out)-1]; symbolize.IsCut(last) {
			if r.cuts == nil {
				r.cuts = map[unwind.Cut]int{}
			}
			r.cuts[s.Cut]++
		}
	}
	return out, memo
}

// stackMemo maps a sample's addresses, kernel count and cut to the
// locations they resolved to, where the sample's time did not choose
// them (no JIT code): the same slice for every sample of that stack. The
// stack of the sample before is compared first: a thread's samples come
// in runs, often of one stack, and a compare costs less than a hash. The
// others are found by their hash in a table of their own (open
// addressing, at most half full): a recording's hundred thousand look-ups
// of a few thousand stacks, which a map's probe made twice as slow.
type stackMemo struct {
	slots []*memoStack // a power of two of them, or none yet
	n     int
	seed  maphash.Seed
	last  *memoStack
}

type memoStack struct {
	addrs  []uint64
	kernel int
	cut    unwind.Cut
	hash   uint64
	locs   []*model.Location
	// table is the stack's id in the table being built plus one, 0
	// until its first sample is added (resolver.build).
	table int32
}

func (e *memoStack) is(addrs []uint64, kernel int, cut unwind.Cut) bool {
	return e.kernel == kernel && slices.Equal(e.addrs, addrs) && e.cut == cut
}

func (m *stackMemo) hash(addrs []uint64, kernel int) uint64 {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(addrs))), 8*len(addrs))
	return maphash.Bytes(m.seed, b) ^ uint64(kernel)
}

// get is the entry of a stack, nil if it has none.
func (m *stackMemo) get(addrs []uint64, kernel int, cut unwind.Cut) *memoStack {
	if m.last != nil && m.last.is(addrs, kernel, cut) {
		return m.last
	}
	if m.n == 0 {
		return nil
	}
	h := m.hash(addrs, kernel)
	mask := uint64(len(m.slots) - 1)
	for i := h & mask; m.slots[i] != nil; i = (i + 1) & mask {
		if e := m.slots[i]; e.hash == h && e.is(addrs, kernel, cut) {
			m.last = e
			return e
		}
	}
	return nil
}

func (m *stackMemo) put(addrs []uint64, kernel int, cut unwind.Cut, locs []*model.Location) *memoStack {
	if m.slots == nil {
		m.seed = maphash.MakeSeed()
	}
	if 2*(m.n+1) > len(m.slots) {
		m.grow()
	}
	e := &memoStack{addrs: slices.Clone(addrs), kernel: kernel, cut: cut, hash: m.hash(addrs, kernel), locs: locs}
	m.insert(e)
	m.n++
	return e
}

// grow doubles the table (to 1,024 slots at first).
func (m *stackMemo) grow() {
	old := m.slots
	m.slots = make([]*memoStack, max(2*len(old), 1024))
	for _, e := range old {
		if e != nil {
			m.insert(e)
		}
	}
}

func (m *stackMemo) insert(e *memoStack) {
	mask := uint64(len(m.slots) - 1)
	i := e.hash & mask
	for m.slots[i] != nil {
		i = (i + 1) & mask
	}
	m.slots[i] = e
}

// grownCopies lists the threads whose stack copies grew (Config.StackCopy
// 0), by TID.
func grownCopies(smp *sampler.Sampler) []model.ThreadStackCopy {
	if smp == nil {
		return nil
	}
	var out []model.ThreadStackCopy
	for _, t := range smp.Threads() { // sorted by TID
		if t.StackCopyGrowths > 0 {
			out = append(out, model.ThreadStackCopy{TID: t.TID, Name: t.Name, Bytes: t.StackCopy})
		}
	}
	return out
}

// grownNote says which threads' stack copies grew, and to what: the
// first few by name, then how many more.
func grownNote(grown []model.ThreadStackCopy, cfg Config) string {
	start, ceiling := cfg.stackCopy()
	var parts []string
	for i, g := range grown {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("and %d more", len(grown)-i))
			break
		}
		name := ""
		if g.Name != "" {
			name = " (" + g.Name + ")"
		}
		parts = append(parts, fmt.Sprintf("%d%s to %s", g.TID, name, sizeText(g.Bytes)))
	}
	threads := fmt.Sprintf("%d threads", len(grown))
	if len(grown) == 1 {
		threads = "1 thread"
	}
	return fmt.Sprintf("the stack copies of %s grew from %s (their stacks needed more; at most %s): %s",
		threads, sizeText(start), sizeText(ceiling), strings.Join(parts, ", "))
}

// threadNames merges what the sampler learnt of thread names (kept after
// threads exit) with the snapshot's.
func threadNames(smp *sampler.Sampler, snap *model.Snapshot) map[int]string {
	names := make(map[int]string)
	if smp != nil {
		for _, t := range smp.Threads() {
			names[t.TID] = t.Name
		}
	}
	if snap != nil {
		for _, t := range snap.Threads {
			if t.Name != "" {
				names[t.TID] = t.Name
			}
		}
	}
	return names
}

// facts gathers what capture.json and the profile's comments say.
type facts struct {
	cfg      Config
	tg       model.Target
	trigger  model.Trigger
	sampled  bool      // false: a snapshot alone
	start    time.Time // of the sampled window (or the snapshot)
	end      time.Time
	stats    sampler.Stats
	symStats symbolize.Stats
	snap     *model.Snapshot
	cutWhy   string
	// exited: the target was gone when the sampling ended, whoever
	// noticed (the sampler, the snapshot, the watchdog, or neither yet):
	// the same for a child of stallwatch (a zombie until reaped) and for
	// any other process.
	exited bool
	notes  []string
	before int // samples from the flight recorder
	unwind UnwindMode
	// cuts counts the user stacks that ended before their thread's first
	// function, by why, of userStacks.
	cuts       map[unwind.Cut]int
	userStacks int
	// copies are the threads whose stack copies grew, and to what.
	copies []model.ThreadStackCopy
	// table is the profile's samples as they were resolved
	// (resolver.build), onCPU and offCPU how many there are of each.
	table         *report.TableBuilder
	onCPU, offCPU int
	// kernel are the readings of the target's kernel context.
	kernel kernelReadings
	// profile is where the target's continuous profile goes.
	profile *model.ContinuousProfile
}

// info is capture.json as the capture saw it; findings are added by
// analyze.
func (f *facts) info() model.Info {
	info := capdir.NewInfo(f.tg, f.trigger)
	info.Start, info.End = f.start, f.end
	info.CutShort, info.CutShortWhy = f.cutWhy != "", f.cutWhy
	info.TargetExited = f.exited || f.stats.TargetExited || (f.snap != nil && f.snap.TargetExited)
	info.Profile = f.profile
	if f.sampled {
		info.Settings = model.Settings{
			Freq:         f.cfg.Freq,
			BaselineFreq: f.cfg.BaselineFreq,
			History:      f.history(),
			CaptureFor:   f.cfg.CaptureFor,
			OffCPU:       !f.cfg.NoOffCPU,
			Kernel:       !f.cfg.NoKernel,
			Unwind:       string(f.unwind),
		}
		if f.unwind == UnwindCFI {
			info.Settings.StackCopy, info.Settings.StackCopyMax = f.cfg.stackCopy()
			info.StackCopyGrown = f.copies
		}
	}
	info.Settings.Ptrace = !f.cfg.NoPtrace
	c := &info.Counts
	c.Samples, c.OffCPU = f.onCPU, f.offCPU
	c.SamplesBefore = f.before
	c.Lost = f.stats.LostRecords
	c.LostSamples = f.stats.LostSamples
	c.Throttled = f.stats.Throttles
	c.Threads = f.stats.ThreadsAttached + f.stats.ThreadsFailed + f.stats.ThreadsOverBudget
	c.UnreadableThreads = f.stats.ThreadsFailed
	c.UnsampledThreads = f.stats.ThreadsOverBudget
	if f.snap != nil {
		c.Threads = max(c.Threads, len(f.snap.Threads))
	}
	for _, j := range f.symStats.JIT {
		if j.Err() == nil || j.Symbols > 0 {
			c.JITSources++
		}
		if j.Truncated != nil {
			c.JITTruncated++
		}
	}
	for _, m := range f.symStats.Mappings {
		if m.Symbols == "" || len(m.Missing) > 0 && m.Addresses > 0 && m.Unnamed == m.Addresses {
			c.MissingSymbols++
		}
	}
	if f.symStats.Unknown > 0 {
		c.MissingSymbols++ // code in no mapping the target had: nothing could name it
	}
	info.KernelContext, info.KernelBefore = f.kernel.windows()
	info.Notes = f.allNotes()
	return info
}

// allNotes says everything a reader needs to trust the numbers: losses,
// threads that could not be watched, missing symbols.
func (f *facts) allNotes() []string {
	notes := append([]string(nil), f.notes...)
	st := f.stats
	if st.LostRecords > 0 || st.LostSamples > 0 {
		notes = append(notes, fmt.Sprintf("the kernel dropped %d records and %d samples (ring buffers full)", st.LostRecords, st.LostSamples))
	}
	if st.Throttles > 0 {
		notes = append(notes, fmt.Sprintf("the kernel throttled sampling %d times (kernel.perf_event_max_sample_rate)", st.Throttles))
	}
	if st.BrokenIntervals > 0 {
		notes = append(notes, fmt.Sprintf("%d off-CPU intervals dropped: their switch-in record was lost", st.BrokenIntervals))
	}
	if st.RecordingDropped > 0 {
		notes = append(notes, fmt.Sprintf("%d samples dropped at the recording's memory bound", st.RecordingDropped))
	}
	if st.ThreadsFailed > 0 {
		notes = append(notes, fmt.Sprintf("%d threads could not be sampled", st.ThreadsFailed))
	}
	if n := st.ThreadsOverBudget; n > 0 {
		notes = append(notes, fmt.Sprintf("%d of %d threads were not sampled for want of file descriptors (RLIMIT_NOFILE); the thread snapshot has them all. %s",
			n, st.ThreadsAttached+st.ThreadsFailed+n, sampler.NoFileFix(f.cfg.descriptorsWanted(st))))
	}
	if st.TargetExited {
		notes = append(notes, "the target exited during the capture")
	}
	if f.symStats.KernelNote != "" {
		notes = append(notes, f.symStats.KernelNote)
	}
	notes = append(notes, f.symStats.Notes...)
	notes = append(notes, cutNotes(f.cuts, f.userStacks, f.unwind, f.cfg)...)
	if f.unwind == UnwindCFI && len(f.copies) > 0 {
		notes = append(notes, grownNote(f.copies, f.cfg))
	}
	if n := f.symStats.Unknown; n > 0 {
		notes = append(notes, fmt.Sprintf("%d addresses were in no mapping of the target: shown as [unknown]", n))
	}
	for _, j := range f.symStats.JIT {
		if err := j.Err(); err != nil {
			notes = append(notes, fmt.Sprintf("JIT symbols %s: %v", j.Path, err))
		}
		if j.Truncated != nil {
			notes = append(notes, fmt.Sprintf("JIT symbols %s: last record still being written, left for later: %v", j.Path, j.Truncated))
		}
		if j.Dropped > 0 || j.Forgotten > 0 {
			notes = append(notes, fmt.Sprintf("JIT symbols %s: at the index's memory bound, %d live code ranges were dropped (oldest first) and %d replaced ones forgotten: samples in them may show as [unknown]", j.Path, j.Dropped, j.Forgotten))
		}
	}
	if f.snap != nil {
		notes = append(notes, f.snap.Notes...)
	}
	return notes
}

// history is how much flight recorder the capture could include: none
// without a baseline sampler.
func (f *facts) history() time.Duration {
	if f.cfg.BaselineFreq == 0 {
		return 0
	}
	return f.cfg.History
}

func (f *facts) meta(info *model.Info) model.Meta {
	return model.Meta{
		Start:    info.Start,
		Duration: info.End.Sub(info.Start),
		Period:   f.cfg.period(),
		Comments: report.InfoComments(info),
	}
}

// resolve has r resolve the windows' samples into the capture's table.
func (f *facts) resolve(r *resolver, windows []window) error {
	tb, on, off, err := r.build(windows, f.cfg.period())
	if err != nil {
		return fmt.Errorf("build profile: %w", err)
	}
	f.table, f.onCPU, f.offCPU = tb, on, off
	return nil
}

// write builds the profile, renders the capture's files and writes the
// capture directory under root, then prunes old ones (cfg.Keep).
func (f *facts) write(root *capdir.Root) (*model.Result, error) {
	c := &report.Capture{Info: f.info(), Threads: f.snap}
	if f.sampled {
		tb := f.table
		if tb == nil {
			tb = report.NewTableBuilder(f.cfg.period(), 0)
		}
		if err := c.SetTable(tb, f.meta(&c.Info)); err != nil {
			return nil, fmt.Errorf("build profile: %w", err)
		}
	}
	if err := analyze(c); err != nil {
		return nil, err
	}
	files, err := report.CaptureFiles(c)
	if err != nil {
		return nil, err
	}
	dir, err := root.Write(&c.Info, files)
	if err != nil {
		return nil, err
	}
	if f.cfg.Keep > 0 {
		f.prune(root)
	}
	return &model.Result{Dir: dir, Trigger: f.trigger, Info: c.Info}, nil
}

// analyze draws the capture's findings (and the runtime its process runs)
// into its capture.json, once, from
// what the capture directory will hold: the profile as profile.pb.gz keeps
// it, the snapshot, capture.json's facts (so that the same findings come
// from the directory read back). Alerts, hooks and the reports read them
// from there.
func analyze(c *report.Capture) error {
	p, err := c.Samples()
	if err != nil {
		return fmt.Errorf("build profile: %w", err)
	}
	analysis.Analyze(&c.Info, p, c.Threads).Into(&c.Info)
	return nil
}

// prune keeps cfg.Keep capture directories, and those whose upload is
// pending (cfg.Uploads) until the upload is done or its queue lets it go.
func (f *facts) prune(root *capdir.Root) {
	var spare func(string) bool
	if f.cfg.Uploads != nil {
		spare = func(name string) bool {
			abs, err := filepath.Abs(filepath.Join(root.Path(), name))
			return err != nil || f.cfg.Uploads.Pending(abs)
		}
	}
	removed, spared, err := root.Prune(f.cfg.Keep, spare)
	if err != nil {
		f.cfg.Logger.Warn("pruning old captures", "err", err)
	}
	if len(removed) > 0 {
		f.cfg.Logger.Info("old captures removed (--keep)", "keep", f.cfg.Keep, "removed", strings.Join(removed, ", "))
	}
	if len(spared) > 0 {
		f.cfg.Logger.Info("old captures kept past --keep: their upload is pending", "keep", f.cfg.Keep, "kept", strings.Join(spared, ", "))
	}
}

// cutNotes says how many sampled stacks end before their thread's first
// function and why, the most frequent reasons first, with the fix where
// there is one: a larger --stack-copy only where the copy was as large as
// asked (the kernel copies less where the stack's next page is not
// resident, and no larger copy changes that), --unwind cfi where frame
// pointers ran out.
func cutNotes(cuts map[unwind.Cut]int, total int, mode UnwindMode, cfg Config) []string {
	copySize, ceiling := cfg.stackCopy()
	if total == 0 || len(cuts) == 0 {
		return nil
	}
	byReason := map[string]int{}
	var full, short, shortEnd, fpOut int
	minCopied, maxCopied, asked := 0, 0, 0
	n := 0
	for c, k := range cuts {
		n += k
		switch {
		case c.Short():
			short += k
			if c.StackEnd {
				shortEnd += k
			}
			if minCopied == 0 || c.Copied < minCopied {
				minCopied = c.Copied
			}
			maxCopied, asked = max(maxCopied, c.Copied), max(asked, c.Limit)
		case c.Reason == unwind.CopyExhausted && mode == UnwindFP:
			fpOut += k
		case c.Reason == unwind.CopyExhausted:
			full += k
		}
		byReason[cutClass(c)] += k
	}
	whys := make([]string, 0, len(byReason))
	for why := range byReason {
		whys = append(whys, why)
	}
	sort.Slice(whys, func(i, j int) bool {
		a, b := byReason[whys[i]], byReason[whys[j]]
		return a > b || a == b && whys[i] < whys[j]
	})
	var parts []string
	shown := 0
	for i, why := range whys {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("%d for other reasons", n-shown))
			break
		}
		parts = append(parts, fmt.Sprintf("%d %s", byReason[why], why))
		shown += byReason[why]
	}
	notes := []string{fmt.Sprintf("%d of %d sampled stacks end before their thread's first function (their last frame says why): %s",
		n, total, strings.Join(parts, ", "))}
	switch {
	case full > 0 && ceiling > 0:
		notes = append(notes, fmt.Sprintf("%d stacks were deeper than their thread's stack copy then: each thread's copies start at %s and double, up to %s, once its stacks need more",
			full, sizeText(copySize), sizeText(ceiling)))
	case full > 0 && copySize < MaxStackCopy:
		notes = append(notes, fmt.Sprintf("%d stacks were deeper than the %d KiB stack copy: --stack-copy %dKiB reaches further (at some CPU cost per sample)",
			full, copySize>>10, min(2*copySize, MaxStackCopy)>>10))
	}
	if fpOut > 0 {
		notes = append(notes, fmt.Sprintf("%d stacks run through code that keeps no frame pointer: --unwind cfi walks them with its call frame information", fpOut))
	}
	if short > 0 {
		copied := sizeText(minCopied)
		switch {
		case maxCopied == minCopied:
		case minCopied%1024 == 0 && maxCopied%1024 == 0:
			copied = fmt.Sprintf("%d–%d KiB", minCopied>>10, maxCopied>>10)
		default:
			copied = fmt.Sprintf("%d–%d bytes", minCopied, maxCopied)
		}
		why := "the stack's next page was not resident (never touched, or swapped out), and the kernel copies without faulting pages in"
		switch {
		case shortEnd == short:
			why = "the stack ends there"
		case shortEnd > 0:
			why += fmt.Sprintf(" (for %d of them the stack ends there)", shortEnd)
		}
		notes = append(notes, fmt.Sprintf("%d stacks end where the kernel copied only %s of the %s of stack asked: %s; a larger --stack-copy does not change that",
			short, copied, sizeText(asked), why))
	}
	return notes
}

// cutClass is how a Cut is counted in the notes: by its reason, but a
// stack copy cut short by the kernel once, whatever it copied.
func cutClass(c unwind.Cut) string {
	if c.Short() {
		if c.StackEnd {
			return "stack copy cut short where the stack ends"
		}
		return "stack copy cut short by the kernel at a page not resident"
	}
	return c.String()
}

// sizeText is n bytes as the notes write it: "1 KiB", "1,032 bytes".
func sizeText(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
