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
