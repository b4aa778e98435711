package watchdog

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/model"
)

// logRecorder is a slog handler that keeps every record, for tests that
// assert on the log lines a user reads.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// states lists the "state" attribute of every state-change line (a line
// with a "from" attribute).
func (l *logRecorder) states() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.recs {
		var st string
		var change bool
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "state":
				st = a.Value.String()
			case "from":
				change = true
			}
			return true
		})
		if change {
			out = append(out, st)
		}
	}
	return out
}

func (l *logRecorder) dump() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.recs {
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		b.WriteString("\n")
	}
	return b.String()
}

// find returns the first record whose message contains msg.
func (l *logRecorder) find(msg string) (slog.Record, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.recs {
		if strings.Contains(r.Message, msg) {
			return r, true
		}
	}
	return slog.Record{}, false
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

// fakeTime makes instants: t(d) is d after an arbitrary boot, with the
// host never suspended.
var wallBase = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func t0(d time.Duration) instant {
	return instant{Mono: time.Hour + d, Boot: 2*time.Hour + d, Wall: wallBase.Add(d)}
}

func newTestDetector(t *testing.T, p policy, names ...string) (*detector, *logRecorder) {
	t.Helper()
	if len(names) == 0 {
		names = []string{"file /run/beat"}
	}
	rec := &logRecorder{}
	return newDetector(p, names, slog.New(rec), t0(0)), rec
}

var defaultPolicy = policy{StallAfter: 10 * time.Second, RecaptureAfter: 5 * time.Minute, MaxCaptures: 6}

const s = time.Second

func TestDetectorStallCaptureRecover(t *testing.T) {
	d, rec := newTestDetector(t, defaultPolicy)
	d.Beat(0, t0(1*s))
	if at, ok := d.Deadline(t0(0)); !ok || at != t0(11*s) {
		t.Fatalf("deadline after a beat at 1s = %v %v, want 11s", at.Mono-time.Hour, ok)
	}
	if act := d.Tick(t0(5 * s)); act.capture != nil {
		t.Fatalf("capture at 5s, 4s after a beat: %+v", act.capture)
	}
	d.Deadline(t0(0))
	act := d.Tick(t0(11 * s))
	if act.capture == nil {
		t.Fatalf("no capture 10s after the last beat; state %v", d.State())
	}
	tr := act.capture
	if tr.Kind != model.Stall || tr.Seq != 1 || tr.StallFor != 10*s || !tr.LastBeat.Equal(wallBase.Add(s)) || tr.Source != "file /run/beat" {
		t.Errorf("trigger = %+v", tr)
	}
	if tr.Mono != uint64(t0(11*s).Mono) {
		t.Errorf("trigger Mono = %d, want %d", tr.Mono, t0(11*s).Mono)
	}
	if !strings.Contains(tr.Reason, "10s") {
		t.Errorf("reason %q does not say how long", tr.Reason)
	}
	if d.State() != stateCapturing {
		t.Errorf("state %v, want capturing", d.State())
	}
	res := &model.Result{Dir: "/out/x", Trigger: *tr}
	d.CaptureDone(t0(21*s), res, nil)
	if d.State() != stateCooldown {
		t.Errorf("state after the capture of a stall that goes on: %v, want cooldown", d.State())
	}
	if at, ok := d.Deadline(t0(0)); !ok || at != t0(11*s+5*time.Minute) {
		t.Errorf("cooldown deadline = %v, want capture start + recapture-after", at.Mono-time.Hour)
	}
	act = d.Beat(0, t0(31*s))
	if len(act.recovered) != 1 || act.recovered[0] != res || act.stall != 30*s {
		t.Errorf("recovery action = %+v, want the capture and a 30s stall", act)
	}
	if d.State() != stateHealthy {
		t.Errorf("state after recovery %v", d.State())
	}
	want := []string{"healthy", "stalled", "capturing", "cooldown", "recovered", "healthy"}
	if got := rec.states(); !slices.Equal(got, want) {
		t.Errorf("state lines %v, want %v", got, want)
	}
	r, ok := rec.find(stateMessages[stateRecovered])
	if !ok || attr(r, "stall").Duration() != 30*s {
		t.Errorf("recovered line lacks the stall's length: %v", r)
	}
}

func TestDetectorNoStallBeforeFirstBeat(t *testing.T) {
	d, rec := newTestDetector(t, defaultPolicy)
	for _, at := range []time.Duration{10 * s, 60 * s, time.Hour} {
		d.Deadline(t0(0))
		if act := d.Tick(t0(at)); act.capture != nil {
			t.Fatalf("capture at %v without any beat", at)
		}
	}
	if d.State() != stateWaiting {
		t.Errorf("state %v, want waiting", d.State())
	}
	if _, ok := rec.find("no heartbeat seen yet"); !ok {
		t.Error("no warning that no heartbeat was seen")
	}
	if _, ok := d.Deadline(t0(0)); ok {
		t.Error("still asks for ticks after warning once")
	}
	d.Beat(0, t0(2*time.Hour))
	if at, _ := d.Deadline(t0(0)); at != t0(2*time.Hour+10*s) {
		t.Errorf("first stall deadline %v, want first beat + stall-after", at.Mono-time.Hour)
	}
}

func TestDetectorLateWakeUpRearms(t *testing.T) {
	tests := []struct {
		name string
		wake instant // when the stall deadline (11s) is served
	}{
		{"starved", t0(14 * s)}, // 3s late, LateAfter 2.5s
		{"suspended", func() instant { i := t0(11 * s); i.Boot += 10 * time.Minute; return i }()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, rec := newTestDetector(t, defaultPolicy)
			d.Beat(0, t0(1*s))
			d.Deadline(t0(0))
			if act := d.Tick(tc.wake); act.capture != nil {
				t.Fatalf("late wake-up blamed on the target: %+v", act.capture)
			}
			if d.State() != stateHealthy {
				t.Errorf("state %v, want healthy", d.State())
			}
			r, ok := rec.find("woke up late")
			if !ok {
				t.Fatal("late wake-up not logged")
			}
			if tc.name == "suspended" && !strings.Contains(attr(r, "why").String(), "suspended") {
				t.Errorf("why = %q", attr(r, "why"))
			}
			// Re-armed: a full stall-after from the wake-up.
			at, ok := d.Deadline(t0(0))
			if !ok || at.Mono != tc.wake.Mono+10*s {
				t.Fatalf("deadline after re-arm = %v, want wake-up + 10s", at.Mono-tc.wake.Mono)
			}
			if act := d.Tick(at); act.capture == nil {
				t.Error("a real stall after the re-arm is not captured")
			}
		})
	}
}

func TestDetectorSlightlyLateIsStillAStall(t *testing.T) {
	d, _ := newTestDetector(t, defaultPolicy)
	d.Beat(0, t0(1*s))
	d.Deadline(t0(0))
	if act := d.Tick(t0(11*s + 400*time.Millisecond)); act.capture == nil {
		t.Fatal("a wake-up 400ms late did not report the stall")
	}
}

func TestDetectorRecaptureAndRateLimit(t *testing.T) {
	p := defaultPolicy
	p.MaxCaptures = 2
	p.RecaptureAfter = time.Minute
	d, rec := newTestDetector(t, p)
	d.Beat(0, t0(0))
	var seqs []int
	now := 10 * s
	for range 5 {
		d.Deadline(t0(0))
		act := d.Tick(t0(now))
		if act.capture != nil {
			seqs = append(seqs, act.capture.Seq)
			d.CaptureDone(t0(now+10*s), &model.Result{Trigger: *act.capture}, nil)
		}
		now += time.Minute
	}
	if !slices.Equal(seqs, []int{1, 2}) {
		t.Fatalf("captures of a 5-minute stall with max 2/hour: seqs %v", seqs)
	}
	if d.State() != stateStalled {
		t.Errorf("state while rate limited: %v", d.State())
	}
	if _, ok := rec.find("--max-captures reached"); !ok {
		t.Error("skipped capture not logged")
	}
	at, ok := d.Deadline(t0(0))
	if !ok || at != t0(10*s+time.Hour) {
		t.Fatalf("rate-limited deadline %v, want the first capture + 1h", at.Mono-time.Hour)
	}
	if act := d.Tick(at); act.capture == nil || act.capture.Seq != 3 {
		t.Fatalf("no recapture when the hour window frees a slot: %+v", act.capture)
	}
}

// TestDetectorFailedCapturesAreFree: a capture that wrote nothing (the
// host refused it, the target could not be read) does not spend the
// target's --max-captures.
func TestDetectorFailedCapturesAreFree(t *testing.T) {
	p := defaultPolicy
	p.MaxCaptures = 2
	p.RecaptureAfter = time.Minute
	d, _ := newTestDetector(t, p)
	d.Beat(0, t0(0))
	now := 10 * s
	written := 0
	for i := range 6 {
		d.Deadline(t0(0))
		act := d.Tick(t0(now))
		if act.capture == nil {
			t.Fatalf("try %d: no capture after %d written", i, written)
		}
		if i < 4 {
			d.CaptureDone(t0(now+s), nil, errors.New("max-captures-per-hour: refused"))
		} else {
			d.CaptureDone(t0(now+s), &model.Result{Trigger: *act.capture}, nil)
			written++
		}
		now += time.Minute
	}
	d.Deadline(t0(0))
	if act := d.Tick(t0(now)); act.capture != nil {
		t.Errorf("a third capture written within the hour with --max-captures 2")
	}
}

func TestDetectorMaxCapturesZeroOnlyLogs(t *testing.T) {
	p := defaultPolicy
	p.MaxCaptures = 0
	d, _ := newTestDetector(t, p)
	d.Beat(0, t0(0))
	d.Deadline(t0(0))
	if act := d.Tick(t0(10 * s)); act.capture != nil {
		t.Fatal("captured with --max-captures 0")
	}
	if d.State() != stateStalled {
		t.Errorf("state %v, want stalled", d.State())
	}
	if act := d.Signal(t0(11*s), 1); act.capture == nil || act.capture.Kind != model.Signal {
		t.Error("SIGUSR1 capture refused with --max-captures 0")
	}
}

func TestDetectorBeatDuringCapture(t *testing.T) {
	d, rec := newTestDetector(t, defaultPolicy)
	d.Beat(0, t0(0))
	d.Deadline(t0(0))
	act := d.Tick(t0(10 * s))
	if act.capture == nil {
		t.Fatal("no capture")
	}
	if a := d.Beat(0, t0(12*s)); a.recovered != nil {
		t.Fatal("stateRecovered called before the capture's result exists")
	}
	if d.State() != stateRecovered {
		t.Errorf("state after a beat during the capture: %v", d.State())
	}
	res := &model.Result{Dir: "d"}
	a := d.CaptureDone(t0(20*s), res, nil)
	if len(a.recovered) != 1 || a.stall != 12*s {
		t.Fatalf("recovery after the capture = %+v, want 1 result, stall 12s (measured at the beat)", a)
	}
	want := []string{"healthy", "stalled", "capturing", "recovered", "healthy"}
	if got := rec.states(); !slices.Equal(got, want) {
		t.Errorf("state lines %v, want %v", got, want)
	}
}

func TestDetectorStallAgainDuringCapture(t *testing.T) {
	// Beats resume during a capture, then stop again before it ends: the
	// second stall's deadline passes while no tick is asked for. That is
	// no late wake-up of the watchdog: the stall is reported.
	d, _ := newTestDetector(t, defaultPolicy)
	d.Beat(0, t0(0))
	d.Deadline(t0(0))
	if act := d.Tick(t0(10 * s)); act.capture == nil {
		t.Fatal("no capture")
	}
	d.Beat(0, t0(12*s))
	if _, ok := d.Deadline(t0(12 * s)); ok {
		t.Error("recovered with a capture running still asks for ticks")
	}
	d.CaptureDone(t0(40*s), &model.Result{}, nil)
	at, ok := d.Deadline(t0(40 * s))
	if !ok || at != t0(22*s) {
		t.Fatalf("deadline %v, want the beat at 12s + 10s", at.Mono-time.Hour)
	}
	act := d.Tick(t0(40*s + 5*time.Millisecond))
	if act.capture == nil || act.capture.StallFor != 28*s+5*time.Millisecond {
		t.Fatalf("second stall not captured: %+v, state %v", act.capture, d.State())
	}
}

func TestDetectorSignal(t *testing.T) {
	d, rec := newTestDetector(t, defaultPolicy)
	d.Beat(0, t0(0))
	act := d.Signal(t0(1*s), 1)
	if act.capture == nil || act.capture.Kind != model.Signal || act.capture.StallFor != 0 {
		t.Fatalf("signal capture = %+v", act.capture)
	}
	if a := d.Signal(t0(2*s), 1); a.capture != nil {
		t.Fatal("second capture started while one runs")
	}
	// A stall starts during the signal's capture: it is logged, and
	// captured once the running capture ends.
	d.Deadline(t0(0))
	if a := d.Tick(t0(10 * s)); a.capture != nil {
		t.Fatal("concurrent capture")
	}
	if r, ok := rec.find(stateMessages[stateStalled]); !ok || attr(r, "state").String() != "capturing" {
		t.Error("stall during a capture not logged")
	}
	a := d.CaptureDone(t0(11*s), &model.Result{}, nil)
	if a.capture == nil || a.capture.Kind != model.Stall || a.capture.Seq != 1 {
		t.Fatalf("after the signal's capture: %+v, want the stall's first capture", a.capture)
	}
	// The queued signal runs after the stall capture.
	a = d.CaptureDone(t0(21*s), &model.Result{}, nil)
	if a.capture == nil || a.capture.Kind != model.Signal || !strings.Contains(a.capture.Reason, "during a stall") {
		t.Fatalf("queued signal capture = %+v", a.capture)
	}
	a = d.Beat(0, t0(25*s))
	if a.recovered != nil || d.State() != stateRecovered {
		t.Fatalf("beat during the signal capture of a stall: %+v, state %v", a, d.State())
	}
	a = d.CaptureDone(t0(31*s), &model.Result{}, nil)
	// The first signal capture began before the stall: it is not one of
	// the stall's captures.
	if len(a.recovered) != 2 || a.stall != 25*s {
		t.Fatalf("recovery: %d results, stall %v; want 2 and 25s", len(a.recovered), a.stall)
	}
}

func TestDetectorSourcesStallIndependently(t *testing.T) {
	d, _ := newTestDetector(t, defaultPolicy, "proc 42", "statsd udp://127.0.0.1:8125")
	d.Beat(0, t0(0))
	d.Beat(1, t0(0))
	for now := s; now < 10*s; now += s {
		d.Beat(0, t0(now)) // the process keeps running
	}
	if at, _ := d.Deadline(t0(0)); at != t0(10*s) {
		t.Fatalf("deadline %v, want the silent source's last beat + 10s", at.Mono-time.Hour)
	}
	act := d.Tick(t0(10 * s))
	if act.capture == nil || act.capture.Source != "statsd udp://127.0.0.1:8125" || act.capture.StallFor != 10*s {
		t.Fatalf("silent metrics source: capture %+v", act.capture)
	}
	d.CaptureDone(t0(30*s), &model.Result{}, nil)
	if a := d.Beat(0, t0(31*s)); a.recovered != nil {
		t.Fatal("recovered by a beat of the source that never stopped")
	}
	if a := d.Beat(1, t0(32*s)); len(a.recovered) != 1 {
		t.Fatal("not recovered when the silent source beat again")
	}
}

func TestDetectorExit(t *testing.T) {
	d, rec := newTestDetector(t, defaultPolicy)
	d.Beat(0, t0(0))
	d.Deadline(t0(0))
	d.Tick(t0(10 * s))
	d.Exit(t0(12 * s))
	if d.State() != stateExited {
		t.Fatalf("state %v", d.State())
	}
	if _, ok := d.Deadline(t0(0)); ok {
		t.Error("exited detector still wants ticks")
	}
	if a := d.Signal(t0(13*s), 1); a.capture != nil {
		t.Error("capture of an exited target")
	}
	r, _ := rec.find(stateMessages[stateExited])
	if attr(r, "was").String() != "capturing" {
		t.Errorf("exit line: was=%v", attr(r, "was"))
	}
}

func TestDetectorFailedCapture(t *testing.T) {
	d, rec := newTestDetector(t, defaultPolicy)
	d.Beat(0, t0(0))
	d.Deadline(t0(0))
	d.Tick(t0(10 * s))
	d.CaptureDone(t0(11*s), nil, context.DeadlineExceeded)
	if _, ok := rec.find("capture failed"); !ok {
		t.Error("failed capture not logged")
	}
	if a := d.Beat(0, t0(12*s)); a.recovered != nil {
		t.Errorf("a failed capture is reported as recovered: %+v", a.recovered)
	}
}
