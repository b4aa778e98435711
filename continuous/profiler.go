package continuous

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify"
	"github.com/stallwatch/stallwatch/notify/spool"
	"github.com/stallwatch/stallwatch/notify/upload"
)

// Bounds and defaults of Config, as docs/commands.md states them.
const (
	DefaultPeriod   = time.Minute
	MinPeriod       = time.Second
	MaxPeriod       = 10 * time.Minute
	DefaultKeep     = 24 * time.Hour
	DefaultMaxBytes = 1 << 30
)

// Queue is where uploads wait until the agent takes them: *spool.Spool.
type Queue interface {
	Add(spool.Item) error
	Pending(key string) bool
}

// Config configures a Profiler.
type Config struct {
	// Period is how long each profile covers (DefaultPeriod; between
	// MinPeriod and MaxPeriod).
	Period time.Duration
	// Dir is where the periods' files go (OUT/profiles).
	Dir string
	// Keep and MaxBytes bound the files kept, by age and in all
	// (DefaultKeep, DefaultMaxBytes).
	Keep     time.Duration
	MaxBytes int64
	// Queue, when set, uploads each period.
	Queue  Queue
	Logger *slog.Logger

	// clock reads the clocks; tests make stallwatch starve.
	clock func() instant
}

// Source is where one target's periods come from: *capture.Session
// with continuous profiling on.
type Source interface {
	// PeriodStart is when the period running now began.
	PeriodStart() capture.Moment
	// Period ends the period running now at end and returns it.
	Period(end capture.Moment) (*capture.Period, error)
}

// Target is one process to profile.
type Target struct {
	PID int
	// Process is its name (the process tag); Tags are its own, beyond
	// what the uploader carries for every target (a daemon rule's
	// service and tags).
	Process string
	Tags    []string
	Source  Source
	// Period is how long each of its profiles covers (0: the Profiler's;
	// between MinPeriod and MaxPeriod).
	Period time.Duration
	// Written, when set, is told of each period written (the file, and
	// the upload queued when there is a queue).
	Written func(path string, p *capture.Period, tags []string)
}

// Profiler cuts the periods of its targets on one schedule, and writes
// and queues them.
type Profiler struct {
	cfg   Config
	log   *slog.Logger
	store *store
	tick  time.Duration
	slack time.Duration
	host  string
	kern  string

	mu      sync.Mutex
	targets map[*Profiled]bool
	starved []interval // recent stretches stallwatch did not run
	anchor  int64      // CLOCK_MONOTONIC to wall time, ns (moment)
	closed  bool
	idle    bool // the schedule sleeps until Add wakes it

	wake chan struct{}
	done chan struct{}
	ran  chan struct{}
}

// Profiled is one target being profiled.
type Profiled struct {
	p      *Profiler
	t      Target
	dir    string
	period time.Duration
	// next is where the period running now is due to end (CLOCK_MONOTONIC
	// ns); start is where it began.
	start uint64
	next  uint64
	marks map[string]string // tag key → value, on every period from now on
	notes map[string]string // tag key → the note that explains it
	gone  bool
	warn  map[string]bool
}

// interval is a stretch of CLOCK_MONOTONIC time.
type interval struct{ from, to instant }

// instant is one reading of the clocks a schedule needs: CLOCK_MONOTONIC
// (samples' clock, which stops while the host is suspended),
// CLOCK_BOOTTIME (which does not: a gap in it that CLOCK_MONOTONIC lacks
// is a suspend) and the wall clock.
type instant struct {
	mono, boot uint64
	wall       time.Time
}

// offset is what CLOCK_MONOTONIC nanoseconds add to become Unix
// nanoseconds at i.
func (i instant) offset() int64 { return i.wall.UnixNano() - int64(i.mono) }

// maxDrift is how far the wall clock may drift from CLOCK_MONOTONIC (NTP
// slewing it) before the periods' wall times follow: until then a
// period is exactly its length in wall time too.
const maxDrift = int64(time.Millisecond)

// moment is CLOCK_MONOTONIC time m in wall time too, by the schedule's
// offset between the clocks — or by now's, for a moment after last when
// the clocks moved apart since (the host was suspended, the wall clock
// stepped).
func (p *Profiler) moment(m uint64, last, now instant) capture.Moment {
	off := p.anchor
	if m > last.mono && abs(now.offset()-p.anchor) > maxDrift {
		off = now.offset()
	}
	return capture.Moment{Mono: m, Wall: time.Unix(0, int64(m)+off)}
}

// follow takes the clocks' offset at now when they drifted apart.
func (p *Profiler) follow(now instant) {
	if abs(now.offset()-p.anchor) > maxDrift {
		p.anchor = now.offset()
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func readClocks() instant {
	m := capture.Now()
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return instant{mono: m.Mono, boot: uint64(ts.Nano()), wall: m.Wall}
}

// Start opens the directory of the periods (reading what earlier runs
// left there) and starts the schedule.
func Start(cfg Config) (*Profiler, error) {
	if cfg.Period == 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Period < MinPeriod || cfg.Period > MaxPeriod {
		return nil, fmt.Errorf("continuous: a period of %v: must be between %v and %v", cfg.Period, MinPeriod, MaxPeriod)
	}
	if cfg.Keep == 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.clock == nil {
		cfg.clock = readClocks
	}
	var pending func(string) bool
	if cfg.Queue != nil {
		pending = cfg.Queue.Pending
	}
	st, err := openStore(cfg.Dir, cfg.Keep, cfg.MaxBytes, pending, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("continuous profiles: %w", err)
	}
	p := &Profiler{cfg: cfg, log: cfg.Logger, store: st, targets: map[*Profiled]bool{},
		wake: make(chan struct{}, 1), done: make(chan struct{}), ran: make(chan struct{})}
	p.setTick()
	p.anchor = cfg.clock().offset()
	p.host, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		p.kern = unix.ByteSliceToString(u.Release[:])
	}
	go p.run()
	return p, nil
}

// Dir is where the periods' files go.
func (p *Profiler) Dir() string { return p.cfg.Dir }

// Period is how long each profile covers, unless a target says.
func (p *Profiler) Period() time.Duration { return p.cfg.Period }

// Add begins profiling t: its first period began at its source's
// PeriodStart and ends a Period later.
func (p *Profiler) Add(t Target) *Profiled {
	period := cmp.Or(t.Period, p.cfg.Period)
	period = min(max(period, MinPeriod), MaxPeriod)
	start := t.Source.PeriodStart()
	pt := &Profiled{p: p, t: t, dir: TargetDir(t.PID, t.Process), period: period, start: start.Mono, next: start.Mono + uint64(period),
		marks: map[string]string{}, notes: map[string]string{}, warn: map[string]bool{}}
	p.store.use(pt.dir, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		pt.gone = true
		return pt
	}
	p.targets[pt] = true
	p.setTick()
	if p.idle {
		p.idle = false
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
	return pt
}

func (p *Profiler) tickNow() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tick
}

// setTick sets the schedule's wake-up: a second at most, a quarter of the
// shortest period when periods are short, so that a late wake-up is seen
// within a quarter of a period (p.mu held).
func (p *Profiler) setTick() {
	shortest := p.cfg.Period
	for t := range p.targets {
		shortest = min(shortest, t.period)
	}
	p.tick = min(time.Second, shortest/4)
	p.slack = max(p.tick, 500*time.Millisecond)
}

// Dir is the directory of the target's periods.
func (t *Profiled) Dir() string { return filepath.Join(t.p.cfg.Dir, t.dir) }

// Mark puts tag key:value, and note in the profile's comments, on every
// period of the target from the one running now on (value "": no longer).
// The daemon's budget says so when it profiles the target less.
func (t *Profiled) Mark(key, value, note string) {
	t.p.mu.Lock()
	defer t.p.mu.Unlock()
	if value == "" {
		delete(t.marks, key)
		delete(t.notes, key)
		return
	}
	t.marks[key], t.notes[key] = value, note
}

// Stop ends the target's period running now at this moment (marked
// stopped) and profiles it no more; a target that exited has had its last
// period already. The session may be closed once Stop returns.
func (t *Profiled) Stop() {
	p := t.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.targets[t] {
		return
	}
	delete(p.targets, t)
	if !t.gone {
		now := p.cfg.clock()
		p.emit(t, p.moment(now.mono, now, now), now, "stopped", "stallwatch stopped profiling the target: the period ends there")
	}
	p.store.use(t.dir, -1)
}

// Close stops every target (Stop) and the schedule.
func (p *Profiler) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	ts := make([]*Profiled, 0, len(p.targets))
	for t := range p.targets {
		ts = append(ts, t)
	}
	p.mu.Unlock()
	slices.SortFunc(ts, func(a, b *Profiled) int { return a.t.PID - b.t.PID })
	for _, t := range ts {
		t.Stop()
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	close(p.done)
	<-p.ran
	p.store.close()
}

// Stats says what the files hold: how many, how many bytes.
func (p *Profiler) Stats() (files int, bytes int64) { return p.store.stats() }

// run is the schedule: at each tick every period due is cut; a tick that
// comes late says stallwatch did not run meanwhile.
func (p *Profiler) run() {
	defer close(p.ran)
	p.mu.Lock()
	armed := p.tick // what the timer waits: a wake-up later than that and the slack is late
	timer := time.NewTimer(armed)
	p.mu.Unlock()
	defer timer.Stop()
	last := p.cfg.clock()
	for {
		select {
		case <-timer.C:
		case <-p.done:
			return
		}
		now := p.cfg.clock()
		p.mu.Lock()
		if len(p.targets) == 0 {
			// Idle (a daemon whose rules profile nothing now): no
			// wake-ups until Add.
			p.idle = true
			p.mu.Unlock()
			select {
			case <-p.wake:
			case <-p.done:
				return
			}
			last = p.cfg.clock()
			armed = p.tickNow()
			timer.Reset(armed)
			continue
		}
		if gap := time.Duration(now.boot - last.boot); gap > armed+p.slack {
			p.starved = append(p.starved, interval{last, now})
			p.log.Warn("stallwatch did not run for a while (starved of CPU, or the host was suspended): the continuous profiles of that time may miss samples, and are marked",
				"for", (gap - armed).Round(time.Millisecond))
		}
		for t := range p.targets {
			p.advance(t, last, now)
			if t.gone {
				delete(p.targets, t)
				p.store.use(t.dir, -1)
			}
		}
		p.forgetStarved(now)
		p.follow(now)
		armed = p.tick
		p.mu.Unlock()
		last = p.cfg.clock()
		timer.Reset(armed)
	}
}

// advance cuts t's periods due by now. When stallwatch did not run from
// last to now, the stretch becomes periods of its own: the period in
// progress is cut where stallwatch last ran, and the one over the gap
// where it ran again, so that no period stretches across it unmarked.
func (p *Profiler) advance(t *Profiled, last, now instant) {
	if n := len(p.starved); n > 0 && p.starved[n-1].to == now {
		iv := p.starved[n-1]
		why := fmt.Sprintf("stallwatch did not run from %s for %v (starved of CPU, or the host suspended)",
			iv.from.wall.UTC().Format(time.RFC3339Nano), time.Duration(iv.to.boot-iv.from.boot).Round(time.Millisecond))
		if from := iv.from.mono; from > t.start && from < t.next {
			p.emit(t, p.moment(from, last, now), now, "stallwatch_starved", why+": the period ends where it last ran")
		}
		for !t.gone && t.next <= iv.to.mono {
			p.emit(t, p.moment(t.next, last, now), now, "", "")
		}
		if to := iv.to.mono; !t.gone && to > t.start {
			p.emit(t, p.moment(to, last, now), now, "stallwatch_starved", why+": the period ends where it ran again")
		}
	}
	for !t.gone && t.next <= now.mono {
		p.emit(t, p.moment(t.next, last, now), now, "", "")
	}
}

// forgetStarved drops the stretches no period can overlap any more.
func (p *Profiler) forgetStarved(now instant) {
	oldest := now.mono
	for t := range p.targets {
		oldest = min(oldest, t.start)
	}
	p.starved = slices.DeleteFunc(p.starved, func(iv interval) bool { return iv.to.mono < oldest })
}

// emit takes t's period ending at end, marks it (cut: why it ended
// early, note: how), writes it and queues its upload.
func (p *Profiler) emit(t *Profiled, end capture.Moment, now instant, cut, note string) {
	per, err := t.t.Source.Period(end)
	if errors.Is(err, model.ErrTargetExited) {
		t.gone = true
		return
	}
	if err != nil {
		t.warnOnce("period", "a continuous profile's period could not be taken; the next one goes on", "pid", t.t.PID, "err", err)
		t.advanceTo(end.Mono, cut != "")
		return
	}
	t.advanceTo(per.End.Mono, cut != "")
	if per.Exited {
		t.gone = true
		cut, note = "target_exited", ""
	}
	if per.End.Mono <= per.Start.Mono {
		return // nothing in it: the target exited as it began
	}
	tags := slices.Clone(t.t.Tags)
	tags = append(tags, upload.ProcessTags(t.t.PID, per.Target.Executable, per.Target.Command, per.Runtime)...)
	if cut != "" {
		tags = append(tags, "period_cut:"+cut)
		if note != "" {
			per.Profile.Comments = append(per.Profile.Comments, "note: "+note)
		}
	}
	if d := p.starvedDuring(per.Start.Mono, per.End.Mono); d > 0 {
		tags = append(tags, "stallwatch_starved_seconds:"+strconv.FormatFloat(d.Round(time.Millisecond).Seconds(), 'f', -1, 64))
		per.Profile.Comments = append(per.Profile.Comments, fmt.Sprintf("note: stallwatch did not run for %v of this period (starved of CPU, or the host suspended): samples may be missing (%d records lost)",
			d.Round(time.Millisecond), per.Stats.LostRecords+per.Stats.LostSamples))
	}
	for _, k := range slices.Sorted(maps.Keys(t.marks)) {
		tags = append(tags, k+":"+t.marks[k])
		if n := t.notes[k]; n != "" {
			per.Profile.Comments = append(per.Profile.Comments, "note: "+n)
		}
	}
	path, err := p.store.write(t.dir, per.Start.Wall, per.Profile)
	if err != nil {
		t.warnOnce("write", "a continuous profile could not be written", "pid", t.t.PID, "dir", t.Dir(), "err", err)
		return
	}
	if q := p.cfg.Queue; q != nil {
		it, err := notify.FileItem(path, upload.Profile{Start: per.Start.Wall, End: per.End.Wall, Tags: tags,
			Runtime: per.Runtime, Hostname: p.host, Kernel: p.kern})
		if err == nil {
			err = q.Add(it)
		}
		if err != nil {
			t.warnOnce("queue", "a continuous profile could not be queued for upload; it stays on disk", "pid", t.t.PID, "file", path, "err", err)
		}
	}
	p.log.Debug("continuous profile written", "pid", t.t.PID, "file", path, "samples", per.Samples, "off_cpu", per.Blocks,
		"start", per.Start.Wall.UTC().Format(time.RFC3339Nano), "end", per.End.Wall.UTC().Format(time.RFC3339Nano))
	if t.t.Written != nil {
		t.t.Written(path, per, tags)
	}
}

// advanceTo moves t's schedule past a period that ended at end: the next
// one is due a Period after the due time passed; a period cut short
// leaves the rest of its time to the next, due when it was.
func (t *Profiled) advanceTo(end uint64, cut bool) {
	t.start = end
	for !cut && t.next <= end {
		t.next += uint64(t.period)
	}
}

// starvedDuring is how long stallwatch did not run between from and to.
func (p *Profiler) starvedDuring(from, to uint64) time.Duration {
	var d time.Duration
	for _, iv := range p.starved {
		a, b := max(from, iv.from.mono), min(to, iv.to.mono)
		if b > a {
			// A suspend stops CLOCK_MONOTONIC: count it by the boot
			// clock, which runs on.
			whole := iv.to.mono - iv.from.mono
			share := float64(b-a) / float64(max(whole, 1))
			d += time.Duration(share * float64(iv.to.boot-iv.from.boot))
		} else if a == b && iv.from.mono == iv.to.mono && from <= a && a < to {
			d += time.Duration(iv.to.boot - iv.from.boot) // a suspend alone
		}
	}
	return d
}

func (t *Profiled) warnOnce(what, msg string, args ...any) {
	if t.warn[what] {
		t.p.log.Debug(msg, args...)
		return
	}
	t.warn[what] = true
	t.p.log.Warn(msg, args...)
}
