package watchdog

import (
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
	oldest      instant // last beat of the most silent source
	beaten      bool
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
	st := Status{State: p.state.String(), Beaten: p.beaten, Captures: p.captures, LastCapture: p.lastCapture}
	if p.beaten {
		st.Age = now.Sub(p.oldest)
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
	if i := d.oldestBeat(); i >= 0 {
		p.oldest, p.beaten = d.last[i], true
	}
	p.inStall = d.inStall()
	p.stallStart = d.stallStart
}

// captured counts a capture written, for Status.
func (w *Watchdog) captured(dir string) {
	w.pub.mu.Lock()
	w.pub.captures++
	w.pub.lastCapture = dir
	w.pub.mu.Unlock()
}
