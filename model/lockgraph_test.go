package model

import (
	"reflect"
	"testing"
)

func TestBuildGraph(t *testing.T) {
	waits := func(edges map[int]int, tids ...int) []Thread {
		var ts []Thread
		for _, tid := range tids {
			th := Thread{TID: tid}
			if to, ok := edges[tid]; ok {
				th.Wait = &Wait{Kind: "mutex", Owner: to, Addr: 0x10}
			}
			ts = append(ts, th)
		}
		return ts
	}
	tests := []struct {
		name   string
		edges  map[int]int
		tids   []int
		cycles [][]int
		chains [][]int
	}{
		{"none", nil, []int{1, 2}, nil, nil},
		{"two-cycle and a waiter", map[int]int{5: 3, 3: 5, 7: 5}, []int{3, 5, 7}, [][]int{{3, 5}}, [][]int{{7, 5}}},
		{"self deadlock", map[int]int{4: 4}, []int{4}, [][]int{{4}}, nil},
		{"three-cycle rotated", map[int]int{9: 2, 2: 6, 6: 9}, []int{2, 6, 9}, [][]int{{2, 6, 9}}, nil},
		{"chains longest first", map[int]int{1: 2, 2: 3, 10: 3, 11: 12}, []int{1, 2, 3, 10, 11, 12},
			nil, [][]int{{1, 2, 3}, {10, 3}, {11, 12}}},
		{"chain into a cycle stops at it", map[int]int{1: 2, 2: 3, 3: 4, 4: 3}, []int{1, 2, 3, 4}, [][]int{{3, 4}}, [][]int{{1, 2, 3}}},
		{"two cycles", map[int]int{1: 2, 2: 1, 3: 4, 4: 3}, []int{1, 2, 3, 4}, [][]int{{1, 2}, {3, 4}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := BuildLockGraph(waits(tc.edges, tc.tids...))
			if len(g.Edges) != len(tc.edges) {
				t.Errorf("%d edges, want %d", len(g.Edges), len(tc.edges))
			}
			if !reflect.DeepEqual(g.Cycles, tc.cycles) {
				t.Errorf("cycles %v, want %v", g.Cycles, tc.cycles)
			}
			if !reflect.DeepEqual(g.Chains, tc.chains) {
				t.Errorf("chains %v, want %v", g.Chains, tc.chains)
			}
		})
	}
}
