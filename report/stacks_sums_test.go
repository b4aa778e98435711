package report

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/google/pprof/profile"
)

// TestCells: the sums by stack and label set are the samples' own, each
// value's last sample the last one with a value other than 0 (-1 for
// none), a repeated (stack, set) after another one back in its first
// cell, the cells in the order of their first samples.
func TestCells(t *testing.T) {
	type sample struct {
		stack, set int32
		vals       [2]int64
	}
	tests := map[string][]sample{
		"empty":       nil,
		"one":         {{0, 0, [2]int64{1, 5}}},
		"zero values": {{0, 0, [2]int64{0, 0}}, {0, 0, [2]int64{0, 3}}},
		"run":         {{1, 0, [2]int64{1, 1}}, {1, 0, [2]int64{1, 2}}, {1, 0, [2]int64{0, 4}}},
		"back":        {{0, 1, [2]int64{1, 1}}, {1, 1, [2]int64{1, 1}}, {0, 1, [2]int64{2, 0}}, {0, 0, [2]int64{1, 1}}},
		"negative":    {{0, 0, [2]int64{-3, 1}}, {0, 0, [2]int64{3, 1}}},
	}
	r := rand.New(rand.NewPCG(3, 4))
	var random []sample
	for range 3000 {
		random = append(random, sample{r.Int32N(40), r.Int32N(7), [2]int64{r.Int64N(3), r.Int64N(1000)}})
	}
	tests["random"] = random
	for name, samples := range tests {
		tab := &table{stacks: make([][]*profile.Location, 40), sets: make([]labelSet, 7), nv: 2}
		for _, s := range samples {
			tab.stack = append(tab.stack, s.stack)
			tab.set = append(tab.set, s.set)
			tab.values = append(tab.values, s.vals[:]...)
		}
		type key = setSum
		var order []key
		sums, last := map[key][2]int64{}, map[key][2]int32{}
		for i, s := range samples {
			k := key{s.stack, s.set}
			if _, ok := sums[k]; !ok {
				order = append(order, k)
				last[k] = [2]int32{-1, -1}
			}
			v, l := sums[k], last[k]
			for vi, x := range s.vals {
				if x != 0 {
					v[vi] += x
					l[vi] = int32(i)
				}
			}
			sums[k], last[k] = v, l
		}
		got := (&stackTable{t: tab}).cells()
		if len(got.cells) != len(order) {
			t.Fatalf("%s: %d cells, want %d", name, len(got.cells), len(order))
		}
		for c, k := range order {
			if got.cells[c] != k {
				t.Errorf("%s: cell %d is %+v, want %+v", name, c, got.cells[c], k)
			}
			var v [2]int64
			var l [2]int32
			for vi := range 2 {
				v[vi], l[vi] = got.value(c, vi)
			}
			if !reflect.DeepEqual(v, sums[k]) || !reflect.DeepEqual(l, last[k]) {
				t.Errorf("%s: cell %+v sums %v (last %v), want %v (last %v)", name, k, v, l, sums[k], last[k])
			}
		}
	}
}
