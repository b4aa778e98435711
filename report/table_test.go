package report

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRadixSort: rows sorted by key as a stable sort sorts them, keys of
// any range (negative, one value, more than 32 bits apart).
func TestRadixSort(t *testing.T) {
	type row struct{ key, seq int64 }
	tests := [][]int64{
		{},
		{5},
		{3, 1, 2, 1, 3, 0},
		{7, 7, 7},
		{-5, 1 << 40, 0, -5, 1<<40 + 1, 300, 299},
	}
	r := rand.New(rand.NewPCG(1, 2))
	var big []int64
	for range 5000 {
		big = append(big, r.Int64N(1<<22)+1_700_000_000_000_000)
	}
	tests = append(tests, big)
	for _, keys := range tests {
		rows := make([]row, len(keys))
		for i, k := range keys {
			rows[i] = row{k, int64(i)}
		}
		want := slices.Clone(rows)
		slices.SortStableFunc(want, func(a, b row) int { return cmp.Compare(a.key, b.key) })
		radixSort(rows, func(r *row) int64 { return r.key })
		if !slices.Equal(rows, want) {
			t.Errorf("radixSort(%v) = %v, want %v", keys[:min(len(keys), 8)], rows[:min(len(rows), 8)], want[:min(len(want), 8)])
		}
	}
}
