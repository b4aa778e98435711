package capture

import (
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/runtimes/cpython"
)

// pyAnnotator gives the samples of a CPython target the Python frames
// that were running: as each sample whose user stack runs through the
// interpreter's evaluation function is decoded (sampler.Config.Annotate,
// with a wakeup per record), the sampled thread's frames are read from
// the interpreter's memory (cpython.Runtime.FramesCached: its thread
// state and frames, a few reads). They are what ran when they were read,
// which is after the sample: the delay is measured for every sample and
// said in capture.json, as the bound on their error.
//
// Frames are kept once each and the samples hold handles to them, so the
// flight recorder's samples cost 8 bytes a frame.
type pyAnnotator struct {
	rt *cpython.Runtime

	mu        sync.Mutex
	states    map[int32]uint64 // tid → PyThreadState
	refreshed time.Time
	gen       uint64 // handles of an older generation are not resolved
	frames    []cpython.Frame
	index     map[cpython.Frame]uint32
	buf       []cpython.Frame
	hbuf      []uint64

	annotated, unknownThread, failed uint64
	delays                           [40]uint64 // by ⌈log2(µs)⌉ of sample → read
}

// Bounds: frames kept (past it, a new generation), and how often the
// thread states are listed again for a thread not seen in them.
const (
	maxPyFrames   = 1 << 20
	statesRefresh = 200 * time.Millisecond
)

func newPyAnnotator(rt *cpython.Runtime) *pyAnnotator {
	return &pyAnnotator{rt: rt, states: map[int32]uint64{}, index: map[cpython.Frame]uint32{}, gen: 1}
}

// annotate is the sampler's Annotate.
func (a *pyAnnotator) annotate(tid int32, t uint64, user []uint64) []uint64 {
	if !a.runsPython(user) {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	state, ok := a.states[tid]
	if !ok && time.Since(a.refreshed) >= statesRefresh {
		a.refresh()
		state, ok = a.states[tid]
	}
	if !ok {
		a.unknownThread++
		return nil
	}
	var err error
	a.buf, err = a.rt.FramesCached(state, a.buf[:0])
	if now := monotime.Now(); now > t {
		a.delays[min(bits.Len64((now-t)/1000), len(a.delays)-1)]++
	}
	if len(a.buf) == 0 {
		if err != nil {
			a.failed++
		}
		return nil
	}
	a.annotated++
	a.hbuf = a.hbuf[:0]
	for _, f := range a.buf {
		a.hbuf = append(a.hbuf, a.handle(f))
	}
	return a.hbuf
}

// runsPython says whether a user stack has a frame of the evaluation
// function (return addresses point after their call).
func (a *pyAnnotator) runsPython(user []uint64) bool {
	for i, pc := range user {
		if a.rt.InEval(pc) || i > 0 && a.rt.InEval(pc-1) {
			return true
		}
	}
	return false
}

func (a *pyAnnotator) refresh() {
	a.refreshed = time.Now()
	ts, _, _ := a.rt.Threads()
	clear(a.states)
	for _, t := range ts {
		if t.TID != 0 {
			a.states[int32(t.TID)] = t.State
		}
	}
}

// handle interns f.
func (a *pyAnnotator) handle(f cpython.Frame) uint64 {
	i, ok := a.index[f]
	if !ok {
		if len(a.frames) >= maxPyFrames {
			a.gen++
			a.frames = a.frames[:0]
			clear(a.index)
		}
		i = uint32(len(a.frames))
		a.frames = append(a.frames, f)
		a.index[f] = i
	}
	return a.gen<<32 | uint64(i)
}

// resolve turns a sample's handles back into frames; nil when they are
// of an older generation.
func (a *pyAnnotator) resolve(hs []uint64) []cpython.Frame {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]cpython.Frame, 0, len(hs))
	for _, h := range hs {
		i := int(uint32(h))
		if h>>32 != a.gen || i >= len(a.frames) {
			return nil
		}
		out = append(out, a.frames[i])
	}
	return out
}

// note says, for capture.json, how many samples got Python frames and
// how long after the sample they were read.
func (a *pyAnnotator) note() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var n uint64
	for _, c := range a.delays {
		n += c
	}
	if n == 0 {
		return ""
	}
	q := func(f float64) string {
		want, seen := uint64(f*float64(n)), uint64(0)
		for b, c := range a.delays {
			if seen += c; seen > want || seen == n {
				return "≤" + time.Duration(uint64(1)<<b*1000).String()
			}
		}
		return "?"
	}
	s := fmt.Sprintf("CPython %s: %d samples in the interpreter got their Python frames, read from its memory as each sample arrived: %s after the sample for half, %s for 99%% (what ran then: the bound on their error)",
		a.rt.Version(), a.annotated, q(0.5), q(0.99))
	if a.failed > 0 || a.unknownThread > 0 {
		s += fmt.Sprintf("; %d could not be read, %d were of threads with no thread state", a.failed, a.unknownThread)
	}
	return s
}

// openPython makes the Python annotator of a CPython target; a CPython
// that cannot be read is a note, not a failure.
func (s *Session) openPython() {
	if s.cfg.NativeOnly {
		return
	}
	rt, err := s.tp.Python()
	switch {
	case err == nil:
		s.py = newPyAnnotator(rt)
	case !errors.Is(err, cpython.ErrNotPython):
		s.notes = append(s.notes, "Python frames not read: "+err.Error())
	}
}
