package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/model"
)

// sameProfile reports whether ours (encodeProfile's bytes) decodes to
// what the library's own encoding of p decodes to.
func sameProfile(t *testing.T, p *profile.Profile) {
	t.Helper()
	var lib bytes.Buffer
	if err := p.WriteUncompressed(&lib); err != nil {
		t.Fatal(err)
	}
	want, err := profile.ParseUncompressed(lib.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	got, err := profile.ParseUncompressed(encodeProfile(nil, p))
	if err != nil {
		t.Fatalf("our encoding does not decode: %v", err)
	}
	if g, w := got.String(), want.String(); g != w {
		t.Fatalf("our encoding decodes to\n%s\nthe library's to\n%s", g, w)
	}
	if len(got.Sample) != len(want.Sample) {
		t.Fatalf("%d samples, the library's %d", len(got.Sample), len(want.Sample))
	}
	for i := range got.Sample {
		g, w := got.Sample[i], want.Sample[i]
		if !equalLabels(g.Label, w.Label) || !equalNumLabels(g.NumLabel, w.NumLabel) || !equalLabels(g.NumUnit, w.NumUnit) {
			t.Fatalf("sample %d: labels %v %v %v, the library's %v %v %v", i, g.Label, g.NumLabel, g.NumUnit, w.Label, w.NumLabel, w.NumUnit)
		}
	}
}

func equalLabels(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w := b[k]
		if len(v) != len(w) {
			return false
		}
		for i := range v {
			if v[i] != w[i] {
				return false
			}
		}
	}
	return true
}

func equalNumLabels(a, b map[string][]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w := b[k]
		if len(v) != len(w) {
			return false
		}
		for i := range v {
			if v[i] != w[i] {
				return false
			}
		}
	}
	return true
}

// TestEncodeProfile: profile.pb.gz as our encoder writes it decodes to
// what pprof's own encoder's bytes decode to, for a capture's profile
// (shared label maps, an end time per sample, inlined lines, kernel and
// user mappings) and for the fields a capture does not use (units of
// numeric labels, several of them, drop and keep frames, no period type).
func TestEncodeProfile(t *testing.T) {
	p, err := BuildProfile(benchSamples(2000), model.Meta{Start: time.Unix(1700000000, 0), Duration: 10 * time.Second,
		Period: int64(time.Second) / 997, Comments: []string{"one", "two", "one"}})
	if err != nil {
		t.Fatal(err)
	}
	sameProfile(t, p)

	odd := p.Copy()
	odd.PeriodType = nil
	odd.DropFrames, odd.KeepFrames, odd.DocURL = "runtime\\..*", "main\\..*", "https://example.com/doc"
	for i, s := range odd.Sample {
		if i%3 == 0 {
			s.NumLabel = map[string][]int64{"bytes": {int64(i), 7}, "alloc": {-1}}
			s.NumUnit = map[string][]string{"bytes": {"bytes", "kilobytes"}, "alloc": {"count"}}
		}
		if i%5 == 0 {
			s.Label = map[string][]string{"a": {"x", "y"}, "b": {""}}
		}
	}
	odd.Location[0].IsFolded = true
	odd.Function[0].StartLine = 12
	sameProfile(t, odd)

	sameProfile(t, &profile.Profile{}) // nothing at all
}

// FuzzEncodeProfile: any profile pprof decodes, encoded by us, decodes
// to what the library's encoding of it decodes to.
func FuzzEncodeProfile(f *testing.F) {
	p, _ := BuildProfile(benchSamples(50), model.Meta{Start: time.Unix(1700000000, 0), Duration: time.Second, Period: 1e6})
	var seed bytes.Buffer
	_ = p.WriteUncompressed(&seed)
	f.Add(seed.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<16 {
			return
		}
		p, err := profile.ParseUncompressed(b)
		if err != nil {
			return
		}
		sameProfile(t, p)
	})
}

// TestEncoderSample: a sample written from its encoded parts is what the
// general encoder writes for it, byte for byte, whatever the lengths
// (one byte or more of them) and with or without values and an end time.
func TestEncoderSample(t *testing.T) {
	long := make([]uint64, 200)
	for i := range long {
		long[i] = uint64(i * 300)
	}
	cases := []struct {
		name   string
		ids    []uint64
		vals   []int64
		labels map[string][]string
		endKey uint64
		end    int64
	}{
		{"capture's", []uint64{1, 2, 3}, []int64{1, 1e6, 0, 1e6}, map[string][]string{"thread id": {"12"}}, 5, 1796655222699392154},
		{"no end time", []uint64{7}, []int64{1, 2}, map[string][]string{"a": {"b"}}, 5, 0},
		{"negative end", []uint64{7}, []int64{-1}, nil, 3, -5},
		{"no values", []uint64{7}, nil, nil, 300, 9},
		{"nothing", nil, nil, nil, 1, 0},
		{"long stack and key", long, []int64{1 << 40}, map[string][]string{"k": {strings.Repeat("v", 300)}}, 1 << 20, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := &pbEncoder{strs: map[string]int64{"": 0}, table: []string{""}}
			got := &pbEncoder{strs: map[string]int64{"": 0}, table: []string{""}}
			var keys []string
			labels := got.stringLabels(c.labels, &keys)
			want.stringLabels(c.labels, &keys) // the same strings interned

			want.begin(2)
			want.packed(1, c.ids)
			vals := make([]uint64, len(c.vals))
			for i, v := range c.vals {
				vals[i] = uint64(v)
			}
			want.packed(2, vals)
			want.b = append(want.b, labels...)
			if c.end != 0 {
				want.numLabel(int64(c.endKey), c.end, 0)
			}
			want.end()

			stack := &pbEncoder{}
			stack.packed(1, c.ids)
			got.sample(stack.b, appendVarints(nil, c.vals), labels, c.endKey, c.end)
			if !bytes.Equal(got.b, want.b) {
				t.Errorf("sample writes\n%x\nthe encoder\n%x", got.b, want.b)
			}
		})
	}
}
