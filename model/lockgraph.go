package model

import (
	"fmt"
	"sort"
)

// via is the short form of a wait for the lock graph's edges.
func via(w *Wait) string {
	switch w.Kind {
	case "mutex":
		return fmt.Sprintf("pthread mutex %#x", w.Addr)
	case "pi-mutex":
		return fmt.Sprintf("PI mutex %#x", w.Addr)
	case "join":
		return "pthread_join"
	case "":
		return w.Desc // a wait read back from threads.pb.gz has no kind
	}
	return w.Kind
}

// BuildLockGraph makes the waits-for graph from the threads' Wait.Owner:
// an edge for every thread that waits for a thread of the process. A
// thread waits for one thing at a time, so each has at most one outgoing
// edge, and cycles are found by following them. A snapshot fills
// Snapshot.Locks with it; a snapshot read back from a file rebuilds it.
func BuildLockGraph(threads []Thread) LockGraph {
	var g LockGraph
	next := map[int]int{}
	for i := range threads {
		t := &threads[i]
		if t.Wait == nil || t.Wait.Owner == 0 {
			continue
		}
		g.Edges = append(g.Edges, Edge{From: t.TID, To: t.Wait.Owner, Via: via(t.Wait)})
		next[t.TID] = t.Wait.Owner
	}
	sort.Slice(g.Edges, func(i, j int) bool { return g.Edges[i].From < g.Edges[j].From })

	inCycle := map[int]bool{}
	done := map[int]bool{}
	for _, e := range g.Edges {
		if done[e.From] {
			continue
		}
		pos := map[int]int{}
		var path []int
		for n := e.From; ; {
			if i, ok := pos[n]; ok {
				g.Cycles = append(g.Cycles, canonicalCycle(path[i:]))
				for _, c := range path[i:] {
					inCycle[c] = true
				}
				break
			}
			if done[n] {
				break
			}
			pos[n] = len(path)
			path = append(path, n)
			nx, ok := next[n]
			if !ok {
				break
			}
			n = nx
		}
		for _, n := range path {
			done[n] = true
		}
	}
	sort.Slice(g.Cycles, func(i, j int) bool { return g.Cycles[i][0] < g.Cycles[j][0] })

	waitedFor := map[int]bool{}
	for _, e := range g.Edges {
		waitedFor[e.To] = true
	}
	for _, e := range g.Edges {
		if waitedFor[e.From] || inCycle[e.From] {
			continue
		}
		chain := []int{e.From}
		for n := e.To; ; n = next[n] {
			chain = append(chain, n)
			if _, ok := next[n]; !ok || inCycle[n] || len(chain) > len(threads) {
				break
			}
		}
		g.Chains = append(g.Chains, chain)
	}
	sort.SliceStable(g.Chains, func(i, j int) bool {
		if len(g.Chains[i]) != len(g.Chains[j]) {
			return len(g.Chains[i]) > len(g.Chains[j])
		}
		return g.Chains[i][0] < g.Chains[j][0]
	})
	return g
}

// canonicalCycle rotates a cycle to start at its smallest tid, so that the
// same deadlock always reads the same.
func canonicalCycle(c []int) []int {
	m := 0
	for i := range c {
		if c[i] < c[m] {
			m = i
		}
	}
	out := make([]int, 0, len(c))
	out = append(out, c[m:]...)
	return append(out, c[:m]...)
}
