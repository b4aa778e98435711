package sampler

import (
	"sort"

	"github.com/stallwatch/stallwatch/internal/monotime"
)

// Recording collects every sample from StartRecording until Stop.
type Recording struct {
	s        *Sampler
	start    uint64
	end      uint64
	samples  []Sample
	bytes    int64
	maxBytes int64
	dropped  uint64
	before   Stats
	after    Stats
	stopped  bool
}

// StartRecording begins collecting samples taken from now on.
func (s *Sampler) StartRecording() *Recording {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drainLocked()
	r := &Recording{s: s, start: monotime.Now(), maxBytes: s.cfg.RecordingBytes, before: s.statsLocked()}
	if !s.closed && !s.gone {
		s.recs[r] = struct{}{}
	}
	return r
}

// Start is when the recording began (CLOCK_MONOTONIC ns).
func (r *Recording) Start() uint64 { return r.start }

// End is when Stop ended it (0 before Stop).
func (r *Recording) End() uint64 { return r.end }

func (r *Recording) add(smp Sample) {
	c, ok := clip(smp, r.start, ^uint64(0))
	if !ok {
		return
	}
	b := sampleBytes(&c)
	if r.bytes+b > r.maxBytes {
		r.dropped++
		return
	}
	r.bytes += b
	r.samples = append(r.samples, c)
}

// Stop ends the recording and returns its samples sorted by time: on-CPU
// samples taken since StartRecording, and off-CPU intervals clipped to the
// recording, those still open closed at Stop — so a thread that blocked
// before the recording and never ran counts for all of it. If the target
// exited, what was recorded until then is returned. Calling Stop again
// returns the same samples.
func (r *Recording) Stop() []Sample {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.stopped {
		return r.samples
	}
	r.stopped = true
	s.drainLocked()
	r.end = monotime.Now()
	if s.gone {
		r.end = min(r.end, max(s.stats.ExitTime, r.start))
	}
	delete(s.recs, r)
	r.samples = s.appendOpen(r.samples, r.start, r.end)
	kept := r.samples[:0]
	for _, smp := range r.samples {
		if c, ok := clip(smp, r.start, r.end); ok {
			kept = append(kept, c)
		}
	}
	r.samples = kept
	sortByTime(r.samples)
	r.after = s.statsLocked()
	return r.samples
}

// Cut ends r at at (CLOCK_MONOTONIC ns; held to between r's start and
// now) and begins, in the same step, the recording that follows it from
// at: every sample is in exactly one of the two — an on-CPU sample taken
// before at in r, one taken at or after it in the next; an off-CPU
// interval across at split there, its first part in r and the rest in the
// next (when it ends, or when the next is stopped or cut). Consecutive
// cuts make contiguous recordings, the periods of continuous profiling:
// r's End is the next one's Start. r is stopped: Stop returns its
// samples, and Stats counts from its start to the cut.
//
// A target that exited ends r at its exit; the next recording then begins
// and ends there.
func (r *Recording) Cut(at uint64) *Recording {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drainLocked()
	if r.stopped {
		at = r.end
	}
	at = min(max(at, r.start), monotime.Now())
	if s.gone {
		at = min(at, max(s.stats.ExitTime, r.start))
	}
	next := &Recording{s: s, start: at, maxBytes: r.maxBytes, before: s.statsLocked()}
	if r.stopped {
		next.end, next.stopped, next.after = at, true, next.before
		return next
	}
	if !s.closed && !s.gone {
		s.recs[next] = struct{}{}
	} else {
		next.end, next.stopped, next.after = at, true, next.before
	}
	kept := r.samples[:0]
	r.bytes = 0
	for _, smp := range r.samples {
		if c, ok := clipBefore(smp, r.start, at); ok {
			kept = append(kept, c)
			r.bytes += sampleBytes(&c)
		}
		if !next.stopped {
			if c, ok := clip(smp, at, ^uint64(0)); ok && (c.Kind == OffCPU || c.Time >= at) {
				next.add(c)
			}
		}
	}
	r.samples = kept
	r.stopped, r.end = true, at
	delete(s.recs, r)
	for _, c := range s.appendOpen(nil, r.start, at) {
		if c, ok := clipBefore(c, r.start, at); ok {
			r.samples = append(r.samples, c)
		}
	}
	sortByTime(r.samples)
	r.after = next.before
	return next
}

// clipBefore limits s to [from, to) for an on-CPU sample (taken exactly
// at to it belongs to what begins there) and to [from, to] for an off-CPU
// interval.
func clipBefore(s Sample, from, to uint64) (Sample, bool) {
	if s.Kind == OnCPU {
		return s, s.Time >= from && s.Time < to
	}
	return clip(s, from, to)
}

// Stats returns what happened during the recording: counters as
// differences between its start and Stop (thread counts and the target's
// exit as at Stop). Before Stop it is the zero Stats.
func (r *Recording) Stats() Stats {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !r.stopped {
		return Stats{}
	}
	d := r.after
	b := r.before
	d.Samples -= b.Samples
	d.OffCPUIntervals -= b.OffCPUIntervals
	d.LostRecords -= b.LostRecords
	d.LostSamples -= b.LostSamples
	d.Throttles -= b.Throttles
	d.Unthrottles -= b.Unthrottles
	d.BrokenIntervals -= b.BrokenIntervals
	d.BadRecords -= b.BadRecords
	d.HistoryEvicted -= b.HistoryEvicted
	d.RecordingDropped = r.dropped
	return d
}

func sortThreads(ts []ThreadInfo) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].TID < ts[j].TID })
}
