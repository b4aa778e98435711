package continuous

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify/spool"
	"github.com/stallwatch/stallwatch/report"
)

// fakeSource is a session whose periods are cut where asked, as
// capture.Session cuts them, with one sample at each period's end.
type fakeSource struct {
	mu     sync.Mutex
	start  capture.Moment
	exit   uint64 // CLOCK_MONOTONIC ns of the exit; 0: alive
	asked  []capture.Moment
	exited bool
}

func (f *fakeSource) PeriodStart() capture.Moment { return f.start }

func (f *fakeSource) Period(end capture.Moment) (*capture.Period, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.exited {
		return nil, model.ErrTargetExited
	}
	f.asked = append(f.asked, end)
	p := &capture.Period{Target: model.Target{PID: 42, Executable: "/usr/bin/node", Command: []string{"node", "app.js"}}, Start: f.start, End: end, Freq: 97, Runtime: "node"}
	if f.exit != 0 && f.exit <= end.Mono {
		p.End = capture.Moment{Mono: f.exit, Wall: end.Wall.Add(-time.Duration(end.Mono - f.exit))}
		p.Exited, f.exited = true, true
	}
	prof, err := report.BuildProfile(nil, model.Meta{Start: p.Start.Wall, Duration: p.End.Wall.Sub(p.Start.Wall), Period: int64(time.Second) / 97})
	if err != nil {
		return nil, err
	}
	p.Profile = prof
	f.start = p.End
	return p, nil
}

// fakeQueue keeps what is queued.
type fakeQueue struct {
	mu    sync.Mutex
	items []spool.Item
	hold  map[string]bool
}

func (q *fakeQueue) Add(it spool.Item) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(q.items, it)
	return nil
}

func (q *fakeQueue) Pending(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.hold[key]
}

// t0 is the fake clocks' origin: now, so that the files written are
// within the store's age bound.
var t0 = time.Now().UTC().Truncate(time.Second)

// at is the clocks' reading d after t0 (mono 1e12 at t0), suspended for
// s before it.
func at(d, s time.Duration) instant {
	return instant{mono: 1e12 + uint64(d), boot: 2e12 + uint64(d+s), wall: t0.Add(d + s)}
}

// testClock is the profiler's clock in a test, at(d, 0): the test moves
// d while the profiler's goroutine reads it.
type testClock struct{ d atomic.Int64 }

func (c *testClock) now() instant        { return at(time.Duration(c.d.Load()), 0) }
func (c *testClock) set(d time.Duration) { c.d.Store(int64(d)) }

func newTestProfiler(t *testing.T, period time.Duration, q Queue) (*Profiler, *testClock) {
	t.Helper()
	clock := &testClock{}
	cfg := Config{Period: period, Dir: filepath.Join(t.TempDir(), DirName), clock: clock.now}
	if q != nil {
		cfg.Queue = q
	}
	p, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, clock
}

type written struct {
	per  *capture.Period
	tags []string
	path string
}

func addFake(p *Profiler, src *fakeSource, got *[]written) *Profiled {
	return p.Add(Target{PID: 42, Process: "node", Tags: []string{"service:api"}, Source: src,
		Written: func(path string, per *capture.Period, tags []string) {
			*got = append(*got, written{per, tags, path})
		}})
}

func hasTag(tags []string, prefix string) bool {
	return slices.ContainsFunc(tags, func(t string) bool { return strings.HasPrefix(t, prefix) })
}

// The schedule: periods end a Period apart, each where the next begins;
// ticks that come late (stallwatch starved) cut the period where it last
// ran, and the periods over the gap are marked with how long it lasted;
// the target's exit cuts the last one; a stop cuts the one in progress.
func TestSchedule(t *testing.T) {
	const P = 10 * time.Second
	p, _ := newTestProfiler(t, P, nil)
	src := &fakeSource{start: capture.Moment{Mono: at(0, 0).mono, Wall: at(0, 0).wall}}
	var got []written
	pt := addFake(p, src, &got)
	p.mu.Lock()
	step := func(last, now instant, starved bool) {
		if starved {
			p.starved = append(p.starved, interval{last, now})
		}
		p.advance(pt, last, now)
		p.follow(now)
	}
	step(at(9*time.Second, 0), at(10*time.Second, 0), false)             // period 1 ends on time
	step(at(10*time.Second, 0), at(21*time.Second, 0), false)            // period 2, a second late: cut at its due time
	step(at(24*time.Second, 0), at(45*time.Second, 0), true)             // starved from 24 s to 45 s
	step(at(45*time.Second, 0), at(52*time.Second, 0), false)            // the period due at 50 s
	step(at(60*time.Second, 0), at(61*time.Second, 5*time.Second), true) // suspended 5 s before 61 s
	step(at(61*time.Second, 5*time.Second), at(70*time.Second, 5*time.Second), false)
	p.mu.Unlock()

	ends := []time.Duration{10, 20, 24, 30, 40, 45, 50, 60, 61, 70}
	if len(got) != len(ends) {
		t.Fatalf("%d periods written, want %d: %+v", len(got), len(ends), src.asked)
	}
	for i, w := range got {
		if w.per.End.Mono != 1e12+uint64(ends[i]*time.Second) {
			t.Errorf("period %d ends at %v, want %vs", i, time.Duration(w.per.End.Mono-1e12), ends[i])
		}
		if i > 0 && w.per.Start != got[i-1].per.End {
			t.Errorf("period %d begins at %+v, the one before ends at %+v", i, w.per.Start, got[i-1].per.End)
		}
		if d := w.per.End.Mono - w.per.Start.Mono; d > uint64(P) || d == 0 {
			t.Errorf("period %d lasts %v, longer than %v", i, time.Duration(d), P)
		}
		// On the wall clock, as long: but for the suspend, which the
		// wall clock saw and CLOCK_MONOTONIC did not.
		if d := w.per.End.Wall.Sub(w.per.Start.Wall); d != time.Duration(w.per.End.Mono-w.per.Start.Mono) && i != 8 {
			t.Errorf("period %d lasts %v on the wall clock, %v on CLOCK_MONOTONIC", i, d, time.Duration(w.per.End.Mono-w.per.Start.Mono))
		}
	}
	// Cut where stallwatch last ran and where it ran again, and the
	// periods over the gap marked with how long it lasted in each.
	for i, cut := range []bool{false, false, true, false, false, true, false, false, true, false} {
		if slices.Contains(got[i].tags, "period_cut:stallwatch_starved") != cut {
			t.Errorf("period %d: tags %v, cut %v", i, got[i].tags, cut)
		}
	}
	for i, want := range map[int]string{3: "6", 4: "10", 5: "5", 8: "6"} {
		if !slices.Contains(got[i].tags, "stallwatch_starved_seconds:"+want) {
			t.Errorf("period %d tags %v, want stallwatch_starved_seconds:%s", i, got[i].tags, want)
		}
	}
	for _, i := range []int{0, 1, 2, 6, 7, 9} {
		if hasTag(got[i].tags, "stallwatch_starved_seconds") {
			t.Errorf("period %d, outside the gaps, is marked: %v", i, got[i].tags)
		}
	}
	// Every period carries the target's tags and its process's.
	for i, w := range got {
		for _, tag := range []string{"service:api", "process_id:42", "process:node", "runtime:node", "language:native"} {
			if !slices.Contains(w.tags, tag) {
				t.Errorf("period %d: tags %v lack %s", i, w.tags, tag)
			}
		}
	}

	// The exit cuts the last period at the exit.
	src.exit = 1e12 + uint64(75*time.Second)
	p.mu.Lock()
	p.advance(pt, at(79*time.Second, 5*time.Second), at(81*time.Second, 5*time.Second))
	p.mu.Unlock()
	last := got[len(got)-1]
	if !last.per.Exited || last.per.End.Mono != src.exit || last.per.Start.Mono != 1e12+uint64(70*time.Second) || !slices.Contains(last.tags, "period_cut:target_exited") || !pt.gone {
		t.Errorf("the last period: %+v, tags %v, gone %v", last.per, last.tags, pt.gone)
	}
}

// Stop cuts the period in progress where it is, marked; the files are
// where Dir says, named by their start, and queued with their window and
// tags; files past the bounds go, oldest first, but not one whose
// upload is queued.
func TestStopFilesAndQueue(t *testing.T) {
	q := &fakeQueue{hold: map[string]bool{}}
	p, clock := newTestProfiler(t, 10*time.Second, q)
	clock.set(4 * time.Second)
	src := &fakeSource{start: capture.Moment{Mono: at(0, 0).mono, Wall: at(0, 0).wall}}
	var got []written
	pt := addFake(p, src, &got)
	pt.Mark("profile_degraded", "rate", "the daemon's budget lowered the rate to 49 Hz")
	pt.Stop()
	if len(got) != 1 || !slices.Contains(got[0].tags, "period_cut:stopped") || !slices.Contains(got[0].tags, "profile_degraded:rate") {
		t.Fatalf("stopping: %+v", got)
	}
	w := got[0]
	if want := filepath.Join(pt.Dir(), FileName(t0)); w.path != want || filepath.Base(pt.Dir()) != "42-node" {
		t.Errorf("written to %s, want %s", w.path, want)
	}
	prof, err := report.ReadProfile(context.Background(), w.path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(prof.Comments, func(c string) bool { return strings.Contains(c, "lowered the rate") }) {
		t.Errorf("the profile's comments %q do not say why it is marked", prof.Comments)
	}
	if len(q.items) != 1 || q.items[0].Key != w.path {
		t.Fatalf("queued %+v, want %s", q.items, w.path)
	}
	var data struct {
		Tags []string
		File struct{ Start, End time.Time }
	}
	if err := json.Unmarshal(q.items[0].Data, &data); err != nil {
		t.Fatal(err)
	}
	if !data.File.Start.Equal(t0) || !data.File.End.Equal(t0.Add(4*time.Second)) || !slices.Equal(data.Tags, w.tags) {
		t.Errorf("queued window %v to %v, tags %v", data.File.Start, data.File.End, data.Tags)
	}
}

// The store keeps its files within its bounds, oldest going first,
// sparing those whose upload waits, and reads back what an earlier run
// left.
func TestStoreBounds(t *testing.T) {
	dir := filepath.Join(t.TempDir(), DirName)
	held := map[string]bool{}
	s, err := openStore(dir, time.Hour, 0, func(p string) bool { return held[p] }, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	prof, err := report.BuildProfile(nil, model.Meta{Start: t0, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var paths []string
	for i, ago := range []time.Duration{2 * time.Hour, 90 * time.Minute, 40 * time.Minute, 20 * time.Minute, 0} {
		start := now.Add(-ago)
		if i == 0 {
			held[s.path("7-julia", FileName(start))] = true // queued: kept past the bound
		}
		path, err := s.write("7-julia", start, prof)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, path)
	}
	left, _ := s.stats()
	if left != 4 { // the first (queued) and the three of the last hour
		t.Errorf("%d files kept, want 4", left)
	}
	for i, path := range paths {
		_, err := os.Stat(path)
		if gone := err != nil; gone != (i == 1) {
			t.Errorf("%s (%d): gone %v", path, i, gone)
		}
	}
	s.close()
	s, err = openStore(dir, time.Hour, 1, func(string) bool { return false }, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if n, _ := s.stats(); n != 4 {
		t.Errorf("a new store finds %d files, want 4", n)
	}
	s.mu.Lock()
	s.pruneLocked(now)
	s.mu.Unlock()
	if n, b := s.stats(); n != 0 || b != 0 {
		t.Errorf("over a 1-byte bound: %d files (%d bytes) kept", n, b)
	}
	if _, err := os.Stat(filepath.Join(dir, "7-julia")); !os.IsNotExist(err) {
		t.Errorf("the emptied directory of a target no longer profiled: %v", err)
	}
}

func TestTargetDir(t *testing.T) {
	for _, c := range []struct {
		pid  int
		name string
		want string
	}{
		{18456, "node", "18456-node"},
		{7, "python3.11", "7-python3.11"},
		{7, "../../etc", "7-_.._etc"},
		{7, "", "7"},
		{7, "a/b c", "7-a_b_c"},
		{7, strings.Repeat("x", 100), "7-" + strings.Repeat("x", 64)},
	} {
		if got := TargetDir(c.pid, c.name); got != c.want {
			t.Errorf("TargetDir(%d, %q) = %q, want %q", c.pid, c.name, got, c.want)
		}
		if pid, ok := parseTargetDir(TargetDir(c.pid, c.name)); !ok || pid != c.pid {
			t.Errorf("parseTargetDir(%q) = %d %v", TargetDir(c.pid, c.name), pid, ok)
		}
	}
}

func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
