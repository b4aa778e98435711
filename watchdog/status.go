package watchdog

import (
	"slices"
	"sync"
	"time"
)

// Status is what a watchdog knows of its target at a moment: what
// `stallwatch ctl status` lists.
type Status struct {
	// State is the detector's state: waiting, healthy, stalled,
	// capturing, cooldown, recovered or exited.
	State string
	// Beaten is false until a heartbeat was seen; Age is then the
	// silence of the most silent heartbeat.
	Beaten bool
	Age    time.Duration
	// StallFor is how long the current stall has lasted (0 when none).
	StallFor time.Duration
	// Captures counts the captures written; LastCapture is the newest's
	// directory.
	Captures    int
	LastCapture string
}

// published is the loop's state as of its last event, for Status.
type published struct {
	mu          sync.Mutex
	state       state
	box         *beatBox  // the beats the loop has not taken yet
	last        []instant // each source's last beat the loop took
	seen        []bool
	stallStart  instant
	inStall     bool
	captures    int
	lastCapture string
}

// Status returns the target's state now. It is safe to call from any
// goroutine, while Run runs or after.
func (w *Watchdog) Status() Status {
	p := &w.pub
	now := w.clk.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Status{State: p.state.String(), Captures: p.captures, LastCapture: p.lastCapture}
	// A healthy target's loop takes its beats only at its deadline: the
	// beats still in the box are newer than what it took.
	last, seen := slices.Clone(p.last), slices.Clone(p.seen)
	if p.box != nil {
		p.box.latest(func(i int, at instant) {
			if i < len(last) {
				last[i], seen[i] = at, true
			}
		})
	}
	var oldest instant
	for i := range last {
		if seen[i] && (!st.Beaten || last[i].Before(oldest)) {
			oldest, st.Beaten = last[i], true
		}
	}
	if st.Beaten {
		st.Age = now.Sub(oldest)
	}
	if p.inStall {
		st.StallFor = now.Sub(p.stallStart)
	}
	return st
}

// publish records the detector's state for Status.
func (l *loop) publish() {
	d, p := l.d, &l.w.pub
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state = d.shown
	p.last = append(p.last[:0], d.last...)
	p.seen = append(p.seen[:0], d.seen...)
	p.inStall = d.inStall()
	p.stallStart = d.stallStart
	if p.box != nil {
		p.box.published()
	}
}

// setBox gives Status the beats a Run has not taken yet.
func (p *published) setBox(b *beatBox) {
	p.mu.Lock()
	p.box = b
	p.mu.Unlock()
}

// captured counts a capture written, for Status.
func (w *Watchdog) captured(dir string) {
	w.pub.mu.Lock()
	w.pub.captures++
	w.pub.lastCapture = dir
	w.pub.mu.Unlock()
}
