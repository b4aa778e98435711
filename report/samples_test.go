package report

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/model"
)

// TestSamplesRoundTrip: the samples read back from profile.pb.gz are what
// was written, as far as the findings read them: each thread's time by
// phase and kind, the stacks' functions, files, lines and kinds.
func TestSamplesRoundTrip(t *testing.T) {
	in := fixtureSamples()
	for i := range in {
		in[i].EndNanos = fixtureStart.UnixNano() + int64(i)*int64(time.Millisecond)
	}
	p, err := BuildProfile(in, fixtureMeta())
	if err != nil {
		t.Fatal(err)
	}
	got := Samples(p)
	if !got.OnCPU || !got.OffCPU || got.Period != fixturePeriod || got.Duration != fixtureMeta().Duration || !got.Start.Equal(fixtureStart) {
		t.Errorf("profile facts: on %v off %v period %d duration %v start %v", got.OnCPU, got.OffCPU, got.Period, got.Duration, got.Start)
	}
	type key struct {
		tid               int
		name, phase       string
		offCPU, preempted bool
		stack             string
	}
	sum := func(samples []model.Sample) map[key]int64 {
		m := map[key]int64{}
		for _, s := range samples {
			var names []string
			for _, l := range s.Stack {
				for _, ln := range l.Lines {
					names = append(names, ln.Function+"@"+ln.File+":"+l.Kind.String())
				}
			}
			ns := s.Nanos
			if !s.OffCPU && ns == 0 {
				ns = max(s.Count, 1) * fixturePeriod
			}
			m[key{s.TID, s.ThreadName, s.Phase, s.OffCPU, s.OffCPU && s.Preempted, strings.Join(names, ";")}] += ns
		}
		return m
	}
	want, have := sum(in), sum(got.Samples)
	for k, v := range want {
		if have[k] != v {
			t.Errorf("%+v: %d ns read back, %d written", k, have[k], v)
		}
	}
	if len(have) != len(want) {
		t.Errorf("%d kinds of samples read back, %d written", len(have), len(want))
	}
	if len(got.Samples) != len(have) {
		t.Errorf("%d samples read back for %d stacks and labels: not summed", len(got.Samples), len(have))
	}
	// The times the sums drop: each phase's span, as its samples give it.
	spans := map[string]model.Span{}
	for _, s := range in {
		if s.EndNanos != 0 {
			ns := s.Nanos
			if !s.OffCPU && ns == 0 {
				ns = max(s.Count, 1) * fixturePeriod
			}
			sp := spans[s.Phase]
			sp.Add(s.EndNanos, ns)
			spans[s.Phase] = sp
		}
	}
	if len(spans) == 0 || !reflect.DeepEqual(got.Spans, spans) {
		t.Errorf("spans %v, want %v", got.Spans, spans)
	}
	if len(got.Mappings) != len(p.Mapping) || got.Mappings[0].File != p.Mapping[0].File {
		t.Errorf("mappings %d, want %d in the profile's order", len(got.Mappings), len(p.Mapping))
	}
}

// TestSamplesOfAnotherProfiler: a profile without stallwatch's sample
// types measures neither on- nor off-CPU time; its samples keep their
// stacks, unnamed locations their addresses.
func TestSamplesOfAnotherProfiler(t *testing.T) {
	m := &profile.Mapping{ID: 1, Start: 0x400000, Limit: 0x500000, File: "/bin/x"}
	l := &profile.Location{ID: 1, Mapping: m, Address: 0x401000}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample:     []*profile.Sample{{Location: []*profile.Location{l}, Value: []int64{3, 30e6}}},
		Mapping:    []*profile.Mapping{m}, Location: []*profile.Location{l},
	}
	got := Samples(p)
	if got.OnCPU || got.OffCPU || len(got.Samples) != 1 || got.Samples[0].Nanos != 0 {
		t.Fatalf("%+v", got)
	}
	if st := got.Samples[0].Stack; len(st) != 1 || st[0].Addr != 0x401000 || len(st[0].Lines) != 0 || st[0].Kind != model.KindNative {
		t.Errorf("stack %+v", st[0])
	}
}
