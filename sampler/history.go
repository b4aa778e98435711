package sampler

import (
	"sort"
	"unsafe"
)

// history is the flight recorder: the most recent samples, bounded by age
// and by memory. Samples are kept in chunks so that eviction drops whole
// chunks without moving samples.
type history struct {
	maxAge   uint64 // ns
	maxBytes int64
	chunks   []*chunk
	bytes    int64
	evicted  uint64 // samples that aged out or were pushed out by the byte bound
}

type chunk struct {
	samples []Sample
	bytes   int64
	maxEnd  uint64 // the latest End of its samples
}

const chunkLen = 512

func sampleBytes(s *Sample) int64 {
	return int64(unsafe.Sizeof(*s)) + 8*int64(cap(s.Stack)+cap(s.Interp)) + int64(cap(s.StackDump))
}

func (h *history) add(s Sample, now uint64) {
	var c *chunk
	if n := len(h.chunks); n > 0 && len(h.chunks[n-1].samples) < chunkLen {
		c = h.chunks[n-1]
	} else {
		c = &chunk{samples: make([]Sample, 0, chunkLen)}
		h.chunks = append(h.chunks, c)
	}
	c.samples = append(c.samples, s)
	b := sampleBytes(&s)
	c.bytes += b
	h.bytes += b
	c.maxEnd = max(c.maxEnd, s.End())
	h.trim(now)
}

// trim drops the oldest chunks while the recorder is over its byte bound or
// they hold nothing younger than its age bound.
func (h *history) trim(now uint64) {
	for len(h.chunks) > 0 {
		c := h.chunks[0]
		old := now > h.maxAge && c.maxEnd < now-h.maxAge
		if h.bytes <= h.maxBytes && !old {
			return
		}
		h.bytes -= c.bytes
		h.evicted += uint64(len(c.samples))
		h.chunks[0] = nil
		h.chunks = h.chunks[1:]
	}
}

// window appends to dst the samples that overlap [from, to], clipped to it.
func (h *history) window(from, to uint64, dst []Sample) []Sample {
	for _, c := range h.chunks {
		if c.maxEnd < from {
			continue
		}
		for _, s := range c.samples {
			if cs, ok := clip(s, from, to); ok {
				dst = append(dst, cs)
			}
		}
	}
	return dst
}

// clip limits s to [from, to]: an on-CPU sample is kept if it was taken
// inside; an off-CPU interval keeps the part inside.
func clip(s Sample, from, to uint64) (Sample, bool) {
	if s.Kind == OnCPU {
		return s, s.Time >= from && s.Time <= to
	}
	start, end := max(s.Time, from), min(s.End(), to)
	if end <= start {
		return s, false
	}
	s.Time, s.Weight = start, end-start
	return s, true
}

func sortByTime(ss []Sample) {
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].Time < ss[j].Time })
}
