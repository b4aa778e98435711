package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
	"github.com/stallwatch/stallwatch/runtimes"
	"github.com/stallwatch/stallwatch/sampler"
	"github.com/stallwatch/stallwatch/symbolize"
)

// Moment is one instant on both clocks: CLOCK_MONOTONIC, which samples
// are stamped with, and the wall clock, which profiles and people read.
type Moment struct {
	Mono uint64
	Wall time.Time
}

// Now reads both clocks.
func Now() Moment {
	w := time.Now()
	return Moment{Mono: monotime.Now(), Wall: w}
}

// Before returns the moment d before m on both clocks.
func (m Moment) Before(d time.Duration) Moment {
	return Moment{Mono: m.Mono - min(m.Mono, uint64(d)), Wall: m.Wall.Add(-d)}
}

// Period is one period of a target's continuous profile: everything
// sampled from Start to End, each sample in exactly one period.
type Period struct {
	Target model.Target
	// Start is the End of the period before (the session's start for
	// the first); End is where it was cut, or the target's exit.
	Start, End Moment
	Exited     bool // the target exited: End is its exit, and no period follows
	// Runtime is the language runtime the target runs, as a capture's
	// analysis recognises it (runtimes: its executable, its libraries, its
	// frames): Datadog's runtime tag; "" when none is recognised.
	Runtime string
	Freq    int  // the rate between captures
	OffCPU  bool // off-CPU intervals are in it
	// Profile is the period's samples: cpu-samples and cpu-time, with
	// off-cpu-time and wall-time when OffCPU; labels as a capture's, but
	// no phase.
	Profile         *profile.Profile
	Samples, Blocks int // on-CPU samples, off-CPU intervals
	Stats           sampler.Stats
	// Captures are the stall captures that sampled during the period,
	// at their own rate: their samples are in the period as well.
	Captures []Span
	// JITSources are the JIT symbol files (jitdumps, perf maps) and
	// interfaces the period's names were read from, as a capture counts
	// them: a report of merged periods says where JIT names came from.
	JITSources []string
	// Notes say what a reader needs to trust the numbers: losses, stacks
	// cut short, symbols missing, captures' denser samples.
	Notes []string
}

// Span is a stretch of a period sampled at a capture's rate.
type Span struct {
	Start, End uint64 // CLOCK_MONOTONIC ns
	Freq       int
	Dir        string // the capture directory ("" when it was not written)
}

// exitNoticed bounds how long Period waits for the sampler to see the
// exit of a target that is gone (it reads the same pidfd as the
// watchdog, within milliseconds).
const exitNoticed = time.Second

// ErrNotProfiling is Period's error when the session does not profile:
// Config.Profile is off, or the sampler could not start.
var ErrNotProfiling = errors.New("no continuous profile: the session samples nothing between captures")

// periods is what the session keeps of continuous profiling.
type periods struct {
	mu    sync.Mutex
	rec   *sampler.Recording // the period running now
	start Moment
	spans []Span
	// sym is the symbolizer's counts at the last period's end: a
	// period's notes say what it missed, not what the session did.
	sym symbolize.Stats
	// runtime is the target's language runtime, once recognised.
	runtime *runtimes.Runtime
	// ref is where the periods go (ProfiledIn).
	ref *model.ContinuousProfile
}

// startPeriods begins the first period now.
func (s *Session) startPeriods() {
	if s.smp == nil {
		return
	}
	p := &s.periods
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rec = s.smp.StartRecording()
	now := Now()
	p.start = Moment{Mono: p.rec.Start(), Wall: now.Wall.Add(-time.Duration(now.Mono - p.rec.Start()))}
}

// PeriodStart is when the period running now began (the session's
// start for the first).
func (s *Session) PeriodStart() Moment {
	p := &s.periods
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.start
}

// ProfiledIn records where the session's periods go (their directory,
// their length, whether they are uploaded), for every capture's
// capture.json and report: the continuous profile of the hour before a
// stall, to compare with.
func (s *Session) ProfiledIn(dir string, period time.Duration, uploaded bool) {
	p := &s.periods
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ref = &model.ContinuousProfile{Dir: dir, Period: period, Since: p.start.Wall, Uploaded: uploaded}
}

// profileRef is where the periods go, for a capture (nil: nowhere).
func (p *periods) profileRef() *model.ContinuousProfile {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ref == nil {
		return nil
	}
	r := *p.ref
	return &r
}

// captured notes a capture that sampled from start to end at freq.
func (p *periods) captured(start, end uint64, freq int, dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rec != nil {
		p.spans = append(p.spans, Span{Start: start, End: end, Freq: freq, Dir: dir})
	}
}

// Period ends the period running now at end and begins the next one
// there, in one step (sampler.Recording.Cut): the period returned holds
// every sample taken since the last one's end, symbolized at each
// sample's time, as a profile. A target that exited ends it at its exit
// (Period.Exited), and no other follows. Periods and captures run side by
// side: a capture's samples are in its period too.
//
// A JVM is asked for its perf map at the period's end, as at a
// capture's start (see jvm.go), so that its compiled Java code is named
// with no flag: one jcmd Compiler.perfmap a period.
//
// end must not be in the future; what was sampled before it is resolved
// now, and what is older than the flight recorder, the capture in
// progress and the next period need is forgotten (target.Forget), so
// that a session profiled for days holds what its recent code needs.
func (s *Session) Period(end Moment) (*Period, error) {
	p := &s.periods
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rec == nil {
		return nil, ErrNotProfiling
	}
	rec, start, spans := p.rec, p.start, p.spans
	if rec.End() != 0 {
		return nil, fmt.Errorf("pid %d: %w", s.cfg.PID, model.ErrTargetExited)
	}
	if !procfs.Alive(s.cfg.PID) {
		// Gone, and the sampler may not know yet (the watchdog saw it
		// first): its exit is where the period ends.
		select {
		case <-s.smp.Done():
		case <-time.After(exitNoticed):
		}
	}
	p.rec, p.spans = rec.Cut(end.Mono), nil
	raw := rec.Stop()
	stop := Moment{Mono: rec.End(), Wall: end.Wall.Add(-time.Duration(end.Mono - rec.End()))}
	p.start = stop
	stats := rec.Stats()
	exited := stats.TargetExited || rec.End() < end.Mono
	if exited {
		p.next() // nothing follows an exit
	}
	// A JVM's compiled code is named as a capture's is: the JVM writes
	// its perf map when asked (or its code cache is read from its
	// memory), and the map is read below with the other JIT sources.
	var jvmNote string
	if !exited {
		jvmNote = s.jvm.jitNames(s.jvm.askPerfMap(context.Background()))
	}
	if err := s.tp.Refresh(); err != nil && !exited {
		s.cfg.Logger.Debug("refreshing what is known of the target", "err", err)
	}
	freq, offCPU := s.restRate()
	per := &Period{Target: s.tg, Start: start, End: stop, Exited: exited, Freq: freq, OffCPU: offCPU, Stats: stats, Captures: spans}
	r := &resolver{tp: s.tp, names: threadNames(s.smp, nil), toWall: between(start, stop), annot: s.annot}
	samples := r.resolve([]window{{"", raw}})
	for _, smp := range raw {
		if smp.Kind == sampler.OffCPU {
			per.Blocks++
		} else {
			per.Samples++
		}
	}
	sym := s.tp.Symbols().Stats()
	st := stats
	st.TargetExited = false // said below, of the period
	f := &facts{cfg: s.cfg, tg: s.tg, stats: st, notes: s.notes, cuts: r.cuts, userStacks: r.total, symStats: since(sym, p.sym), unwind: s.unwind, copies: grownCopies(s.smp)}
	p.sym = sym
	for _, j := range sym.JIT {
		if j.Err() == nil || j.Symbols > 0 {
			per.JITSources = append(per.JITSources, j.Path)
		}
	}
	f.addNote(jvmNote)
	per.Notes = append(f.allNotes(), spanNotes(spans, freq)...)
	if exited {
		per.Notes = append(per.Notes, "the target exited: the period ends at its exit")
	}
	prof, err := report.BuildProfile(samples, model.Meta{
		Start: start.Wall, Duration: stop.Wall.Sub(start.Wall), Period: int64(time.Second) / int64(freq),
		Comments: per.comments(),
	})
	if err != nil {
		return nil, fmt.Errorf("build profile: %w", err)
	}
	if !offCPU {
		onCPUOnly(prof)
	}
	per.Profile = prof
	per.Runtime = s.runtimeOf(samples)
	s.tp.Forget(s.horizon(stop.Mono))
	return per, nil
}

// runtimeOf recognises the target's runtime as the analysis of a capture
// does: by its executable, then its libraries, then the frames of
// samples (a runtime linked into the program, as Go's). Once known it is
// kept.
func (s *Session) runtimeOf(samples []model.Sample) string {
	p := &s.periods
	if p.runtime != nil {
		return p.runtime.ID
	}
	for _, n := range []string{s.tg.Executable, first(s.tg.Command)} {
		if r := runtimes.OfExecutable(n); n != "" && r != nil {
			p.runtime = r
			return r.ID
		}
	}
	for _, m := range s.tp.Space().Modules() {
		if r := runtimes.OfLibrary(m.Path); m.IsFile() && r != nil {
			p.runtime = r
			return r.ID
		}
		// A Go program links its runtime in: its executable says so
		// before any frame does.
		if m.Path == s.tg.Executable && m.File != nil {
			if g, err := m.File.Go(); err == nil && g != nil {
				p.runtime = runtimes.Go
				return runtimes.Go.ID
			}
		}
	}
	for _, smp := range samples {
		for _, l := range smp.Stack {
			for _, ln := range l.Lines {
				if r := runtimes.OfFrame(ln.Function); r != nil {
					p.runtime = r
					return r.ID
				}
			}
		}
	}
	return ""
}

func first(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// next marks that no period follows.
func (p *periods) next() {
	if p.rec != nil {
		p.rec.Stop()
	}
}

// horizon is the earliest sample time anything still open may resolve:
// the next period's start, the capture in progress and the flight
// recorder's history before it.
func (s *Session) horizon(next uint64) uint64 {
	h := next
	if c := s.capturing.Load(); c != 0 {
		h = min(h, c)
	}
	if s.cfg.BaselineFreq > 0 {
		h -= min(h, uint64(s.cfg.History))
	}
	return h
}

// between turns CLOCK_MONOTONIC nanoseconds into Unix nanoseconds along
// the period from start to stop, so that every sample of the period is
// stamped inside it, whatever the wall clock did meanwhile.
func between(start, stop Moment) func(uint64) int64 {
	m0, w0 := start.Mono, start.Wall.UnixNano()
	dm, dw := stop.Mono-start.Mono, stop.Wall.UnixNano()-w0
	return func(mono uint64) int64 {
		if dm == 0 || mono <= m0 {
			return w0
		}
		if mono >= stop.Mono {
			return w0 + dw
		}
		return w0 + int64(float64(mono-m0)/float64(dm)*float64(dw))
	}
}

// since is the symbolizer's counts of what a period missed: those of the
// session now, less those at the period before's end.
func since(now, before symbolize.Stats) symbolize.Stats {
	now.Unknown -= min(now.Unknown, before.Unknown)
	now.Unnamed -= min(now.Unnamed, before.Unnamed)
	return now
}

// spanNotes say which stretches of a period captures sampled faster.
func spanNotes(spans []Span, freq int) []string {
	var notes []string
	for _, sp := range spans {
		where := ""
		if sp.Dir != "" {
			where = " (" + sp.Dir + ")"
		}
		notes = append(notes, fmt.Sprintf("a stall capture%s sampled at %d Hz for %v of this period, not %d Hz: its samples are in the period too, so cpu-samples counts are denser there (cpu-time is exact)",
			where, sp.Freq, time.Duration(sp.End-sp.Start).Round(time.Millisecond), freq))
	}
	return notes
}

// JITSourceComment begins a period profile's comment that names one JIT
// symbol source its names were read from.
const JITSourceComment = "JIT symbols from: "

// comments are the profile's own account of the period.
func (p *Period) comments() []string {
	c := []string{fmt.Sprintf("stallwatch continuous profile: pid %d from %s to %s (%v)", p.Target.PID,
		p.Start.Wall.UTC().Format(time.RFC3339Nano), p.End.Wall.UTC().Format(time.RFC3339Nano), p.End.Wall.Sub(p.Start.Wall))}
	if len(p.Target.Command) > 0 {
		c = append(c, "command: "+strings.Join(p.Target.Command, " "))
	}
	kinds := "on-CPU"
	if p.OffCPU {
		kinds = "on-CPU and off-CPU"
	}
	c = append(c, fmt.Sprintf("sampled %s at %d Hz: %d on-CPU samples, %d off-CPU intervals", kinds, p.Freq, p.Samples, p.Blocks))
	c = append(c, fmt.Sprintf("lost: %d records, %d samples; throttled %d times", p.Stats.LostRecords, p.Stats.LostSamples, p.Stats.Throttles))
	for _, src := range p.JITSources {
		c = append(c, JITSourceComment+src)
	}
	for _, n := range p.Notes {
		c = append(c, "note: "+n)
	}
	return c
}

// onCPUOnly keeps the sample types a profile without off-CPU samples
// has: cpu-samples and cpu-time, the latter the default (as ddprof's).
func onCPUOnly(p *profile.Profile) {
	keep := []int{}
	for i, st := range p.SampleType {
		if st.Type == model.TypeCPUSamples || st.Type == model.TypeCPUTime {
			keep = append(keep, i)
		}
	}
	types := make([]*profile.ValueType, len(keep))
	for j, i := range keep {
		types[j] = p.SampleType[i]
	}
	p.SampleType = types
	for _, smp := range p.Sample {
		v := make([]int64, len(keep))
		for j, i := range keep {
			v[j] = smp.Value[i]
		}
		smp.Value = v
	}
	p.Sample = slices.DeleteFunc(p.Sample, func(s *profile.Sample) bool { return s.Value[0] == 0 && s.Value[1] == 0 })
	p.DefaultSampleType = model.TypeCPUTime
}
