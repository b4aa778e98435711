package sampler

import (
	"reflect"
	"testing"
)

func TestClip(t *testing.T) {
	cases := []struct {
		name string
		in   Sample
		ok   bool
		out  Sample
	}{
		{"on-CPU inside", Sample{Kind: OnCPU, Time: 150, Weight: 9}, true, Sample{Kind: OnCPU, Time: 150, Weight: 9}},
		{"on-CPU before", Sample{Kind: OnCPU, Time: 99}, false, Sample{}},
		{"on-CPU after", Sample{Kind: OnCPU, Time: 201}, false, Sample{}},
		{"interval across the start", Sample{Kind: OffCPU, Time: 50, Weight: 100}, true, Sample{Kind: OffCPU, Time: 100, Weight: 50}},
		{"interval across both ends", Sample{Kind: OffCPU, Time: 0, Weight: 1000}, true, Sample{Kind: OffCPU, Time: 100, Weight: 100}},
		{"interval inside", Sample{Kind: OffCPU, Time: 120, Weight: 10}, true, Sample{Kind: OffCPU, Time: 120, Weight: 10}},
		{"interval ending at the start", Sample{Kind: OffCPU, Time: 50, Weight: 50}, false, Sample{}},
		{"interval after", Sample{Kind: OffCPU, Time: 250, Weight: 5}, false, Sample{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := clip(c.in, 100, 200)
			if ok != c.ok || (ok && !reflect.DeepEqual(got, c.out)) {
				t.Errorf("clip = %+v %v, want %+v %v", got, ok, c.out, c.ok)
			}
		})
	}
}

func TestHistoryBounds(t *testing.T) {
	t.Run("age", func(t *testing.T) {
		h := &history{maxAge: 1000, maxBytes: 1 << 40}
		for i := uint64(0); i < 5*chunkLen; i++ {
			h.add(Sample{Time: i * 10}, i*10)
		}
		now := uint64(5*chunkLen-1) * 10
		got := h.window(0, now, nil)
		if len(got) == 0 || got[0].Time+1000 < now-chunkLen*10 {
			t.Errorf("oldest kept sample at %d with now %d and a 1000 ns bound (chunks of %d)", got[0].Time, now, chunkLen)
		}
		if h.evicted == 0 || h.evicted+uint64(len(got)) != 5*chunkLen {
			t.Errorf("evicted %d + kept %d != added %d", h.evicted, len(got), 5*chunkLen)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		one := sampleBytes(&Sample{Stack: make([]uint64, 4)})
		h := &history{maxAge: 1 << 62, maxBytes: one * 3 * chunkLen}
		for i := uint64(0); i < 10*chunkLen; i++ {
			h.add(Sample{Time: i, Stack: make([]uint64, 4)}, i)
		}
		if h.bytes > h.maxBytes {
			t.Errorf("%d bytes held, bound %d", h.bytes, h.maxBytes)
		}
		got := h.window(0, 1<<62, nil)
		if len(got) < 2*chunkLen || got[len(got)-1].Time != 10*chunkLen-1 {
			t.Errorf("kept %d samples ending at %d: the newest must stay", len(got), got[len(got)-1].Time)
		}
	})
	t.Run("window clips intervals", func(t *testing.T) {
		h := &history{maxAge: 1 << 62, maxBytes: 1 << 40}
		h.add(Sample{Kind: OffCPU, Time: 10, Weight: 100}, 110)
		h.add(Sample{Kind: OnCPU, Time: 50}, 110)
		h.add(Sample{Kind: OnCPU, Time: 5}, 110)
		got := h.window(40, 60, nil)
		want := []Sample{{Kind: OffCPU, Time: 40, Weight: 20}, {Kind: OnCPU, Time: 50}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
}

// A Recording past its byte bound drops samples and counts them.
func TestRecordingByteBound(t *testing.T) {
	one := sampleBytes(&Sample{Stack: make([]uint64, 8)})
	r := &Recording{start: 100, maxBytes: 3 * one}
	for i := uint64(0); i < 5; i++ {
		r.add(Sample{Time: 100 + i, Stack: make([]uint64, 8)})
	}
	r.add(Sample{Time: 50, Stack: make([]uint64, 8)}) // before the start: not kept, not dropped
	if len(r.samples) != 3 || r.dropped != 2 {
		t.Errorf("kept %d, dropped %d; want 3 and 2", len(r.samples), r.dropped)
	}
}
