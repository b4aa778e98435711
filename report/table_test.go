package report

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/analysis"
	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/model"
)

// TestStableOrder: the order of keys as a stable sort gives it, keys of
// any range (negative, one value, more than 40 bits apart: the
// comparison sort's path).
func TestStableOrder(t *testing.T) {
	tests := [][]int64{
		{},
		{5},
		{3, 1, 2, 1, 3, 0},
		{7, 7, 7},
		{-5, 1 << 30, 0, -5, 1<<30 + 1, 300, 299},
		{-5, 1 << 50, 0, -5, 1<<50 + 1, 300, 299},
		{1, 2, 2, 3, 1 << 50},    // in order already: not sorted
		{1, 2, 2, 3, 1 << 50, 2}, // all but the last
	}
	r := rand.New(rand.NewPCG(1, 2))
	var big []int64
	for range 5000 {
		big = append(big, r.Int64N(1<<34)+1_700_000_000_000_000_000)
	}
	sorted := slices.Sorted(slices.Values(big))
	// Two rings read a round at a time: sorted runs, each reaching back
	// into the one before.
	var rings []int64
	for round := 0; round < len(sorted); round += 500 {
		chunk := sorted[round:min(round+500, len(sorted))]
		for _, k := range chunk {
			if k%2 == 0 {
				rings = append(rings, k)
			}
		}
		for _, k := range chunk {
			if k%2 != 0 {
				rings = append(rings, k)
			}
		}
	}
	var repeats []int64 // few runs, each reaching back to the start
	for range 8 {
		repeats = append(repeats, sorted[:500]...)
	}
	tests = append(tests, big, sorted, rings, repeats)
	for _, keys := range tests {
		want := make([]int32, len(keys))
		for i := range want {
			want[i] = int32(i)
		}
		slices.SortStableFunc(want, func(a, b int32) int { return cmp.Compare(keys[a], keys[b]) })
		if got := stableOrder(keys); !slices.Equal(got, want) {
			t.Errorf("stableOrder(%v) = %v, want %v", keys[:min(len(keys), 8)], got[:min(len(got), 8)], want[:min(len(want), 8)])
		}
	}
	// mergeRuns merges runs that reach back into the tail of those
	// before, and gives up on runs that reach back far.
	for _, tt := range []struct {
		name   string
		keys   []int64
		merged bool
	}{
		{"rings", rings, true},
		{"ties across runs", []int64{1, 5, 5, 2, 5, 6, 0, 5}, true},
		{"repeats", repeats, false},
	} {
		want := make([]int32, len(tt.keys))
		for i := range want {
			want[i] = int32(i)
		}
		slices.SortStableFunc(want, func(a, b int32) int { return cmp.Compare(tt.keys[a], tt.keys[b]) })
		got := make([]int32, len(tt.keys))
		if merged := mergeRuns(tt.keys, got); merged != tt.merged {
			t.Errorf("%s: mergeRuns merged %v, want %v", tt.name, merged, tt.merged)
		} else if merged && !slices.Equal(got, want) {
			t.Errorf("%s: mergeRuns = %v, want %v", tt.name, got[:min(len(got), 8)], want[:min(len(want), 8)])
		}
	}
}

// TestSetSamplesAsBuildProfile: a capture made from its samples
// (SetSamples, as package capture makes one) writes the profile.pb.gz,
// report.txt and report.html a capture of BuildProfile's profile writes,
// and its findings' samples are those Samples reads from that profile.
func TestSetSamplesAsBuildProfile(t *testing.T) {
	built := &Capture{Info: fixtureInfo(), Threads: fixtureSnapshot()}
	if err := built.SetSamples(fixtureSamples(), fixtureMeta()); err != nil {
		t.Fatal(err)
	}
	made := fixtureCapture(t)
	mp, err := built.Samples()
	if err != nil {
		t.Fatal(err)
	}
	if want := Samples(made.Profile); !reflect.DeepEqual(mp.Samples, want.Samples) || !reflect.DeepEqual(mp.Mappings, want.Mappings) {
		t.Error("the findings' samples differ from those Samples reads from the profile")
	}
	analysis.Analyze(&built.Info, mp, built.Threads).Into(&built.Info)
	files := func(c *Capture) map[string][]byte {
		t.Helper()
		fs, err := CaptureFiles(c)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]byte{}
		for _, f := range fs {
			var b bytes.Buffer
			if err := f.Write(&b); err != nil {
				t.Fatal(err)
			}
			out[f.Name] = b.Bytes()
		}
		return out
	}
	if !reflect.DeepEqual(built.Info.Findings, made.Info.Findings) {
		t.Fatalf("findings %v, from the profile %v", built.Info.Findings, made.Info.Findings)
	}
	got, want := files(built), files(made)
	for name, w := range want {
		g := got[name]
		if name == capdir.FileProfile {
			gp, err := profile.Parse(bytes.NewReader(g))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			wp, _ := profile.Parse(bytes.NewReader(w))
			if gp.String() != wp.String() {
				t.Errorf("%s decodes to\n%.3000s\nBuildProfile's to\n%.3000s", name, gp, wp)
			}
			continue
		}
		if !bytes.Equal(g, w) {
			t.Errorf("%s differs from BuildProfile's capture's (%d and %d bytes)", name, len(g), len(w))
		}
	}
}

// TestEncodeTable: a table encoded decodes to what the library's encoding
// of the same samples' BuildProfile decodes to, labels and end times
// included.
func TestEncodeTable(t *testing.T) {
	samples := benchSamples(2000)
	for i := range samples {
		if i%7 == 0 {
			samples[i].EndNanos = 0 // untimed: merged by stack and labels
		}
	}
	meta := model.Meta{Start: time.Unix(1700000000, 0), Duration: 10 * time.Second, Period: int64(time.Second) / 997, Comments: []string{"one"}}
	tab, err := buildTable(samples, meta)
	if err != nil {
		t.Fatal(err)
	}
	p, err := BuildProfile(samples, meta)
	if err != nil {
		t.Fatal(err)
	}
	var lib bytes.Buffer
	if err := p.WriteUncompressed(&lib); err != nil {
		t.Fatal(err)
	}
	want, _ := profile.ParseUncompressed(lib.Bytes())
	got, err := profile.ParseUncompressed(encodeTable(nil, tab))
	if err != nil {
		t.Fatalf("the table's encoding does not decode: %v", err)
	}
	if g, w := got.String(), want.String(); g != w {
		t.Fatalf("the table's encoding decodes to\n%.3000s\nthe library's to\n%.3000s", g, w)
	}
	for i := range got.Sample {
		g, w := got.Sample[i], want.Sample[i]
		if !equalLabels(g.Label, w.Label) || !equalNumLabels(g.NumLabel, w.NumLabel) {
			t.Fatalf("sample %d: labels %v %v, the library's %v %v", i, g.Label, g.NumLabel, w.Label, w.NumLabel)
		}
	}
}

// builtFixtureCapture is the fixture capture made as package capture
// makes one: from its samples (SetSamples), its findings from the
// table's samples.
func builtFixtureCapture(t *testing.T) *Capture {
	c := &Capture{Info: fixtureInfo(), Threads: fixtureSnapshot()}
	if err := c.SetSamples(fixtureSamples(), fixtureMeta()); err != nil {
		t.Fatal(err)
	}
	mp, err := c.Samples()
	if err != nil {
		t.Fatal(err)
	}
	analysis.Analyze(&c.Info, mp, c.Threads).Into(&c.Info)
	return c
}

// TestWriteTable: the encoding written as it is made (a spill at a time,
// over many spills) is encodeTable's, byte for byte.
func TestWriteTable(t *testing.T) {
	tab, err := buildTable(benchSamples(5000), model.Meta{Start: time.Unix(1700000000, 0), Duration: time.Second, Period: 1e6})
	if err != nil {
		t.Fatal(err)
	}
	want := encodeTable(nil, tab)
	if len(want) < 4*spillBytes {
		t.Fatalf("%d bytes: too few to spill several times", len(want))
	}
	var got bytes.Buffer
	if err := writeTable(&got, tab); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("written %d bytes, encoded %d, not the same", got.Len(), len(want))
	}
}

// TestSlotIndex: keys get their slots in the order first asked for, and
// keep them, whether the index is a slice or a map.
func TestSlotIndex(t *testing.T) {
	keys := []uint64{7, 0, 7, 3, 0, 9, 3}
	want := []struct {
		slot  int
		added bool
	}{{0, true}, {1, true}, {0, false}, {2, true}, {1, false}, {3, true}, {2, false}}
	for _, denseUpTo := range []int{10, 0} {
		x, next := newSlotIndex(10, denseUpTo), 0
		for i, k := range keys {
			slot, added := x.slot(k, next)
			if slot != want[i].slot || added != want[i].added {
				t.Errorf("dense up to %d: key %d: slot %d added %v, want %+v", denseUpTo, k, slot, added, want[i])
			}
			if added {
				next++
			}
		}
	}
}

// TestTableBuilder: a table fed sample by sample with each distinct
// stack slice numbered once (as package capture feeds one) encodes as
// buildTable's of the same samples; what it refuses, it refuses with the
// sample's index.
func TestTableBuilder(t *testing.T) {
	meta := model.Meta{Start: time.Unix(1700000000, 0), Duration: 10 * time.Second, Period: 1e6, Comments: []string{"one"}}
	samples := benchSamples(3000)
	for i := range samples {
		if i%9 == 0 {
			samples[i].EndNanos = 0
		}
		if i%5 == 0 && i > 0 {
			samples[i].EndNanos = samples[i-1].EndNanos // merged with the one before
		}
	}
	frame := samples[0].Stack[0]
	tests := []struct {
		name    string
		samples []model.Sample
		period  int64
		add     func(tb *TableBuilder, s *model.Sample, id int32) error
		wantErr string
	}{
		{name: "numbered once", samples: samples, period: meta.Period},
		{name: "none", period: meta.Period},
		{name: "by AddSample", samples: samples, period: meta.Period,
			add: func(tb *TableBuilder, s *model.Sample, _ int32) error { return tb.AddSample(s) }},
		{name: "stack not numbered", samples: samples[:3], period: meta.Period,
			add:     func(tb *TableBuilder, s *model.Sample, id int32) error { return tb.Add(id+1, s) },
			wantErr: "sample 0 (tid " + strconv.Itoa(samples[0].TID) + "): stack 1 of 1"},
		{name: "negative stack", samples: samples[:3], period: meta.Period,
			add:     func(tb *TableBuilder, s *model.Sample, id int32) error { return tb.Add(-1, s) },
			wantErr: "stack -1 of 1"},
		{name: "by AddWeight", samples: samples, period: meta.Period,
			add: func(tb *TableBuilder, s *model.Sample, id int32) error {
				return tb.AddWeight(id, tb.Labels(s), s.Count, s.Nanos, s.EndNanos)
			}},
		{name: "label set not numbered", samples: samples[:3], period: meta.Period,
			add:     func(tb *TableBuilder, s *model.Sample, id int32) error { return tb.AddWeight(id, 0, 1, 0, 1) },
			wantErr: "sample 0 (tid 0): label set 0 of 0"},
		{name: "negative weight by AddWeight", samples: samples[:3], period: meta.Period,
			add: func(tb *TableBuilder, s *model.Sample, id int32) error {
				return tb.AddWeight(id, tb.Labels(s), 0, -5, 1)
			},
			wantErr: "sample 0 (tid " + strconv.Itoa(samples[0].TID) + "): negative weight (count 0, -5 ns)"},
		{name: "negative weight", samples: []model.Sample{{Stack: []*model.Location{frame}, TID: 7, Nanos: -1}}, period: meta.Period,
			wantErr: "sample 0 (tid 7): negative weight"},
		{name: "nil frame", samples: []model.Sample{{Stack: []*model.Location{frame}}, {Stack: []*model.Location{frame, nil}}}, period: meta.Period,
			wantErr: "sample 1 (tid 0): frame 1 is nil"},
		{name: "another period", samples: samples[:10], period: 2e6,
			wantErr: "period of 2000000 ns given a profile of 1000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := NewTableBuilder(tt.period, len(tt.samples))
			ids := map[**model.Location]int32{} // by slice: benchSamples share their stacks
			var err error
			for i := range tt.samples {
				s := &tt.samples[i]
				var id int32
				if len(s.Stack) > 0 && s.Stack[len(s.Stack)-1] != nil {
					var ok bool
					if id, ok = ids[&s.Stack[0]]; !ok {
						if id, err = tb.Stack(s.Stack); err != nil {
							break
						}
						ids[&s.Stack[0]] = id
					}
				} else if id, err = tb.Stack(s.Stack); err != nil {
					break
				}
				if tt.add != nil {
					err = tt.add(tb, s, id)
				} else {
					err = tb.Add(id, s)
				}
				if err != nil {
					break
				}
			}
			var got *table
			if err == nil {
				got, err = tb.table(model.Meta{Start: meta.Start, Duration: meta.Duration, Period: meta.Period, Comments: meta.Comments})
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, err := buildTable(tt.samples, meta)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(encodeTable(nil, got), encodeTable(nil, want)) {
				t.Errorf("the table built sample by sample encodes unlike buildTable's")
			}
			if !slices.Equal(got.endOrder(), want.endOrder()) || got.len() != want.len() {
				t.Errorf("%d samples in end order %v, buildTable's %d: %v", got.len(), got.endOrder()[:min(got.len(), 8)], want.len(), want.endOrder()[:min(want.len(), 8)])
			}
		})
	}
}
