package model

import "testing"

// TestSpan: a span covers every sample added, from the earliest start
// (end less nanos) to the latest end, and merging covers both spans; an
// empty span adds nothing to a merge.
func TestSpan(t *testing.T) {
	for _, c := range []struct {
		name    string
		samples [][2]int64 // end, nanos
		merge   Span
		want    Span
	}{
		{"empty", nil, Span{}, Span{}},
		{"one on-CPU sample", [][2]int64{{100, 10}}, Span{}, Span{90, 100}},
		{"an off-CPU interval starting first", [][2]int64{{100, 10}, {95, 50}}, Span{}, Span{45, 100}},
		{"out of order", [][2]int64{{300, 1}, {100, 1}, {200, 1}}, Span{}, Span{99, 300}},
		{"starting at the epoch", [][2]int64{{10, 10}, {20, 1}}, Span{}, Span{0, 20}},
		{"merged into nothing", nil, Span{5, 7}, Span{5, 7}},
		{"merged wider", [][2]int64{{100, 10}}, Span{50, 200}, Span{50, 200}},
		{"merged inside", [][2]int64{{100, 50}}, Span{60, 70}, Span{50, 100}},
	} {
		var s Span
		for _, x := range c.samples {
			s.Add(x[0], x[1])
		}
		s.Merge(c.merge)
		if s != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, s, c.want)
		}
	}
}
