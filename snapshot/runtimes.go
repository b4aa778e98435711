package snapshot

import (
	"slices"

	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/runtimes"
)

// A target's language runtimes are read through their descriptors'
// readers (package runtimes; the target opens those of the runtimes it
// runs: target.Process.Readers): a reading begins before any thread is
// stopped, reads what must be read of each thread while it stands still
// (Reading.Stop: V8's JavaScript frames, CPython's Python frames, the
// registers HotSpot's frames start at), and puts what it read into the
// snapshot once the native stacks are named and the stops are over
// (Reading.Apply: the runtime's frames in place of the native frames
// that run them, thread names, waits for a GIL or a Java monitor, a
// safepoint held up, notes).

// beginReadings begins the reading of each runtime the target runs that
// the caller does not read itself (Options.Unread).
func (tk *taker) beginReadings() {
	for _, r := range tk.tg.Readers() {
		if slices.Contains(tk.opts.Unread, r.Runtime) {
			continue
		}
		if r.Err != nil {
			tk.note("%s: %v", r.Runtime.Reader.NotRead(), r.Err)
			continue
		}
		rd, err := r.Instance.Begin()
		if err != nil {
			tk.note("%s: %v", r.Runtime.Reader.NotRead(), err)
			continue
		}
		tk.readings = append(tk.readings, rd)
	}
}

// readStopped has each runtime read thread tid while it stands still:
// stopped (regs are its registers) or, without a stop, blocked (tr is its
// stack) or running (tr is empty).
func (tk *taker) readStopped(tid int, stopped bool, regs unwind.Regs, tr unwind.Trace) {
	if len(tk.readings) == 0 {
		return
	}
	st := runtimes.Stop{Stopped: stopped, PCs: tr.PCs, FPs: tr.FPs, Exact: tr.Exact}
	if stopped {
		st.PC, st.SP, st.FP = regs.IP, regs.SP, regs.BP
	}
	for _, r := range tk.readings {
		r.Stop(tid, st)
	}
}

// applyReadings puts what each runtime read into the snapshot.
func (tk *taker) applyReadings() {
	for _, r := range tk.readings {
		r.Apply(tk.snap, tk.note)
	}
}
