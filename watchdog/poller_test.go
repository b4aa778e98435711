package watchdog

import (
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// pollLog records, for each target of a poller on a fake clock, when it
// was read (ms after the poller's epoch).
type pollLog struct {
	mu  sync.Mutex
	clk *fakeClock
	pl  *Poller
	at  map[string][]int
}

func (l *pollLog) progress(name string, interval time.Duration) *Progress {
	p := &Progress{PID: os.Getpid(), Interval: interval, Poller: l.pl}
	p.polled = func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.at[name] = append(l.at[name], int((l.clk.Now().Mono-l.pl.epoch)/time.Millisecond))
	}
	return p
}

func (l *pollLog) get(name string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.at[name])
}

// pendingTimers counts the fake clock's timers not yet fired or stopped.
func (c *fakeClock) pendingTimers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped {
			n++
		}
	}
	return n
}

// TestPollerSharedGrid: targets with the same interval are read in the
// same wake-ups whenever they joined, the first reading within one
// interval of joining and every later one an interval apart; another
// interval has its own grid; one timer serves them all, and none is left
// once the last target is removed.
func TestPollerSharedGrid(t *testing.T) {
	clk := &fakeClock{now: t0(0)}
	l := &pollLog{clk: clk, pl: newPoller(clk), at: map[string][]int{}}
	step := func(ms int) {
		for range ms / 100 {
			clk.advance(100*time.Millisecond, 0)
		}
	}
	beat := func() {}
	a := l.pl.add(l.progress("a", time.Second), beat)
	step(400)
	b := l.pl.add(l.progress("b", time.Second), beat)
	step(600) // t = 1000
	c := l.pl.add(l.progress("c", 300*time.Millisecond), beat)
	if n := clk.pendingTimers(); n != 1 {
		t.Errorf("%d timers armed for three targets, want 1", n)
	}
	step(1200) // t = 2200
	want := map[string][]int{"a": {1000, 2000}, "b": {1000, 2000}, "c": {1200, 1500, 1800, 2100}}
	for name, w := range want {
		if got := l.get(name); !slices.Equal(got, w) {
			t.Errorf("%s read at %v ms, want %v", name, got, w)
		}
	}
	for _, e := range []*pollEntry{a, b, c} {
		l.pl.remove(e)
	}
	if n := clk.pendingTimers(); n != 0 {
		t.Errorf("%d timers armed with no target", n)
	}
	step(2000)
	if got := l.get("c"); len(got) != 4 {
		t.Errorf("c read after its removal: %v", got)
	}
}

// TestPollerPidReused: a reading taken by pid counts only if the process
// the poller holds (its pidfd) had not exited: here the pid names a busy
// process, as a recycled pid would, while the pidfd holds one that exited.
func TestPollerPidReused(t *testing.T) {
	busy := testutil.Start(t, "/bin/sh", "-c", "while :; do :; done")
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	oldFd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
	if err != nil {
		testutil.Skip(t, "no pidfd: %v", err)
	}
	_ = cmd.Wait() // exited and reaped: its pid is free for another process
	busyFd, err := unix.PidfdOpen(busy.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	pl := NewPoller()
	beats := map[string]int{}
	entry := func(name string, fd int) *pollEntry {
		return &pollEntry{p: &Progress{PID: busy.Pid}, beat: func() { beats[name]++ }, interval: time.Second, pidfd: fd, first: true}
	}
	reused, same := entry("reused", oldFd), entry("same", busyFd)
	defer unix.Close(oldFd)
	defer unix.Close(busyFd)
	// Read both until the live target has beaten for its start and for
	// its progress since.
	if err := testutil.Eventually(10*time.Second, func() bool {
		pl.read([]*pollEntry{reused, same})
		return beats["same"] >= 2
	}); err != nil {
		t.Errorf("the live target beat %d times, want its start and its progress", beats["same"])
	}
	if beats["reused"] != 0 || !reused.gone {
		t.Errorf("the recycled pid was read as the target: %d beats, gone %v", beats["reused"], reused.gone)
	}
}

// TestProgressStartChecked: a Progress whose Start is not the process's
// start time (the pid was reused before watching began) never beats,
// though the process it names is busy; with the right start time it does.
func TestProgressStartChecked(t *testing.T) {
	busy := testutil.Start(t, "/bin/sh", "-c", "while :; do :; done")
	st, err := procfs.ReadStat(busy.Pid, busy.Pid)
	if err != nil {
		t.Fatal(err)
	}
	wrong := &Progress{PID: busy.Pid, Start: st.StartTime + 1, Interval: 20 * time.Millisecond}
	ps := pollsOf(wrong)
	bc := runSource(t, wrong)
	ps.wait(t, 5)
	select {
	case <-bc.ch:
		t.Fatal("another process's progress beat for the target")
	default:
	}
	right := &Progress{PID: busy.Pid, Start: st.StartTime, Interval: 20 * time.Millisecond}
	runSource(t, right).expectBeat(t, "the target itself runs", 2*time.Second)
}

// TestProgressSharedPoller: targets read by one poller beat on their own
// progress only: a stopped one is silent while a running one beats.
func TestProgressSharedPoller(t *testing.T) {
	pl := NewPoller()
	busy := testutil.Start(t, "/bin/sh", "-c", "while :; do :; done")
	frozen := testutil.Start(t, "/bin/sh", "-c", "while :; do :; done")
	if err := stopCont(frozen.Pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer unix.Kill(frozen.Pid, unix.SIGCONT)
	fp := &Progress{PID: frozen.Pid, Interval: 20 * time.Millisecond, Poller: pl}
	ps := pollsOf(fp)
	fb := runSource(t, fp)
	bb := runSource(t, &Progress{PID: busy.Pid, Interval: 20 * time.Millisecond, Poller: pl})
	fb.expectBeat(t, "watching began", 2*time.Second)
	bb.expectBeat(t, "watching began", 2*time.Second)
	fb.quietFor(t, ps, "SIGSTOP", 10)
	bb.expectBeat(t, "the busy process runs", 2*time.Second)
}

// TestRealClock: Mono is CLOCK_MONOTONIC itself (the clock perf stamps
// samples with) and Boot − Mono is CLOCK_BOOTTIME's offset, though beats
// make no system call for either.
func TestRealClock(t *testing.T) {
	var c realClock
	c.syncBoot()
	for range 1000 {
		var before, after, boot, last unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &before)
		now := c.Now()
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &after)
		_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot)
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &last)
		// Mono is CLOCK_MONOTONIC exactly: between the readings around it.
		if m := now.Mono; m < time.Duration(before.Nano()) || m > time.Duration(after.Nano()) {
			t.Fatalf("Mono %v outside [%v, %v], the clock_gettime(CLOCK_MONOTONIC) calls around it",
				m, time.Duration(before.Nano()), time.Duration(after.Nano()))
		}
		// The boot offset is the suspended time: constant unless the host
		// is suspended meanwhile. Each side reads it between two
		// CLOCK_MONOTONIC readings and is good to half their distance
		// (the clock's, to 50µs unless four tries in a row were preempted).
		width := time.Duration(last.Nano() - after.Nano())
		off := time.Duration(boot.Nano()) - time.Duration(after.Nano()) - width/2
		if d := (now.suspendOffset() - off).Abs(); d > width/2+time.Millisecond {
			t.Errorf("boot offset %v, CLOCK_BOOTTIME says %v ± %v", now.suspendOffset(), off, width/2)
		}
	}
}

// TestBeatBoxWakesOnlyWhenAsked: a healthy loop is not woken by beats,
// but takes them all when it asks again, and Status sees them meanwhile.
func TestBeatBoxWakesOnlyWhenAsked(t *testing.T) {
	clk := &fakeClock{now: t0(0)}
	b := newBeatBox(2, clk)
	b.wakeOnBeat(false)
	b.put(1)
	select {
	case <-b.ready:
		t.Fatal("a beat woke a loop that did not ask")
	default:
	}
	var seen []int
	b.latest(func(i int, _ instant) { seen = append(seen, i) })
	if !slices.Equal(seen, []int{1}) {
		t.Errorf("beats pending: %v, want [1]", seen)
	}
	b.wakeOnBeat(true)
	select {
	case <-b.ready:
	default:
		t.Fatal("the beat that came while the loop slept was not handed over when it asked")
	}
}

// TestStatusSeesUntakenBeats: a healthy target's loop takes its beats at
// its deadline only; Status counts the heartbeat's age from the newest
// beat all the same.
func TestStatusSeesUntakenBeats(t *testing.T) {
	clk := &fakeClock{now: t0(0)}
	src := &manualSource{beats: make(chan struct{})}
	w, _, _ := runWatchdog(t, Config{Sources: []Source{src}, StallAfter: 10 * time.Second, MaxCaptures: 6,
		Capturer: newFakeCapturer(time.Hour), Logger: slog.New(&logRecorder{}), clock: clk})
	src.beats <- struct{}{}
	if err := testutil.Eventually(2*time.Second, func() bool { return w.Status().State == "healthy" }); err != nil {
		t.Fatalf("never healthy: %+v", w.Status())
	}
	clk.advance(4*time.Second, 0)
	src.beats <- struct{}{}
	if err := testutil.Eventually(2*time.Second, func() bool { return w.Status().Age == 0 }); err != nil {
		t.Errorf("after a beat 4s later: %+v", w.Status())
	}
	clk.advance(7*time.Second, 0) // past the first beat's deadline, not the second's
	if st := w.Status(); st.State != "healthy" || st.Age != 7*time.Second {
		t.Errorf("7s after the second beat: %+v", st)
	}
}

// TestPollerGridIsTheClocks: a real poller reads on the multiples of the
// interval on CLOCK_MONOTONIC itself, the instants a daemon's other
// periodic work (exec batches, watchdog deadlines rounded to their
// grain) falls on, so that one wake-up serves them all; the first reading
// after a target joins is still within an interval.
func TestPollerGridIsTheClocks(t *testing.T) {
	pl := NewPoller()
	for _, interval := range []time.Duration{time.Second, 300 * time.Millisecond} {
		before := monotime.Duration()
		e := pl.add(&Progress{PID: os.Getpid(), Interval: interval}, func() {})
		after := monotime.Duration()
		pl.mu.Lock()
		due := e.due
		pl.mu.Unlock()
		pl.remove(e)
		if due%interval != 0 {
			t.Errorf("interval %v: the next reading is due at %v, no multiple of it", interval, due)
		}
		if due <= before || due > after+interval {
			t.Errorf("interval %v: the next reading is due at %v, not within an interval of joining (%v..%v)", interval, due, before, after)
		}
	}
}
