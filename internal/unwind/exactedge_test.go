package unwind

import "testing"

// TestExactEdgeHolds: a verdict kept by the frames' exact addresses is
// given back only for the same three addresses, in the layout generation
// it was kept in, and, where it depended on JIT code, in the same JIT
// generation for the sample times it held for.
func TestExactEdgeHolds(t *testing.T) {
	fileEdge := &edge{verdict: edgeMissing, missing: 0x1234}
	jitEdge := &edge{verdict: edgeOK, jit: true, gen: 1, jitGen: 5, span: JITSpan{100, 200}}
	kept := walker{gen: 1, jitGen: 5, t: 150}
	for _, tc := range []struct {
		name             string
		e                *edge
		dec              decision // what the extents it was found by depended on
		ra, below, under uint64   // asked for
		w                walker   // the walk asking
		want             bool
	}{
		{"file code, same frames", fileEdge, decision{span: anyTime}, 10, 20, 30, kept, true},
		{"file code, later JIT generation and time", fileEdge, decision{span: anyTime}, 10, 20, 30, walker{gen: 1, jitGen: 9, t: 999}, true},
		{"file code, new layout", fileEdge, decision{span: anyTime}, 10, 20, 30, walker{gen: 2, jitGen: 5, t: 150}, false},
		{"other return address", fileEdge, decision{span: anyTime}, 11, 20, 30, kept, false},
		{"other frame below", fileEdge, decision{span: anyTime}, 10, 21, 30, kept, false},
		{"other frame under", fileEdge, decision{span: anyTime}, 10, 20, 0, kept, false},
		{"JIT verdict, inside its span", jitEdge, decision{span: anyTime}, 10, 20, 30, walker{gen: 1, jitGen: 5, t: 199}, true},
		{"JIT verdict, after its span", jitEdge, decision{span: anyTime}, 10, 20, 30, walker{gen: 1, jitGen: 5, t: 200}, false},
		{"JIT verdict, later JIT generation", jitEdge, decision{span: anyTime}, 10, 20, 30, walker{gen: 1, jitGen: 6, t: 150}, false},
		{"file verdict by a JIT extent, inside both spans", fileEdge, decision{jit: true, span: JITSpan{120, 160}}, 10, 20, 30, walker{gen: 1, jitGen: 5, t: 159}, true},
		{"file verdict by a JIT extent, past the extent's span", fileEdge, decision{jit: true, span: JITSpan{120, 160}}, 10, 20, 30, walker{gen: 1, jitGen: 5, t: 170}, false},
		{"file verdict by a JIT extent, later JIT generation", fileEdge, decision{jit: true, span: JITSpan{120, 160}}, 10, 20, 30, walker{gen: 1, jitGen: 6, t: 150}, false},
		{"JIT verdict by a JIT extent, only where both hold", jitEdge, decision{jit: true, span: JITSpan{50, 120}}, 10, 20, 30, walker{gen: 1, jitGen: 5, t: 110}, true},
		{"JIT verdict by a JIT extent, the verdict's span alone", jitEdge, decision{jit: true, span: JITSpan{50, 120}}, 10, 20, 30, walker{gen: 1, jitGen: 5, t: 130}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Process{}
			w := kept
			both := tc.dec.span
			if tc.e.jit {
				both = both.and(tc.e.span)
			}
			if !both.holds(w.t) {
				w.t = both.From // kept at a time both hold for
			}
			w.dec = tc.dec
			p.keepExactEdge(10, 20, 30, &w, tc.e)
			got := p.exactEdge(tc.ra, tc.below, tc.under, &tc.w)
			if (got != nil) != tc.want || got != nil && got != tc.e {
				t.Errorf("exactEdge = %v, want found %v (%v)", got, tc.want, tc.e)
			}
		})
	}
}

// TestExactEdgeNotKeptOutsideItsSpan: a verdict that does not hold for
// the sample it was found for is not kept.
func TestExactEdgeNotKeptOutsideItsSpan(t *testing.T) {
	p := &Process{}
	w := walker{gen: 1, jitGen: 5, t: 300, dec: decision{span: anyTime}}
	e := &edge{jit: true, gen: 1, jitGen: 5, span: JITSpan{100, 200}}
	p.keepExactEdge(10, 20, 30, &w, e)
	w.t = 150
	if got := p.exactEdge(10, 20, 30, &w); got != nil {
		t.Errorf("kept a verdict outside its span: %v", got)
	}
}
