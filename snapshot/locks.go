package snapshot

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/stallwatch/stallwatch/internal/unwind"
)

// Futex commands (linux/futex.h) and the PI word's owner mask.
const (
	futexWait          = 0
	futexLockPI        = 6
	futexTrylockPI     = 8
	futexWaitBitset    = 9
	futexWaitRequeuePI = 11
	futexLockPI2       = 13

	futexTIDMask   = 0x3fffffff
	futexOwnerDied = 0x40000000
)

// glibcMutexOwnerOffset is where glibc's pthread_mutex_t keeps the owner's
// tid: int __lock; unsigned __count; int __owner (x86-64 and every other
// Linux ABI glibc supports).
const glibcMutexOwnerOffset = 8

// futexWaitOf describes what a thread blocked in futex(2) waits for: the
// owner of the lock when the futex word or the pthread_mutex_t around it
// names one, and says so when nothing does.
func futexWaitOf(t *Thread, mem unwind.Memory, tids map[int]bool) *Wait {
	a := t.Syscall.Args
	uaddr, cmd, val := a[0], a[1]&futexCmdMask, uint32(a[2])
	w := &Wait{Kind: "futex", Addr: uaddr}
	var b [12]byte
	n, _ := mem.ReadAt(b[:], uaddr)
	if n < 4 {
		w.Desc = fmt.Sprintf("futex %#x (owner unknown: the futex word is not readable)", uaddr)
		return w
	}
	word := binary.LittleEndian.Uint32(b[:])
	switch cmd {
	case futexLockPI, futexLockPI2, futexTrylockPI:
		// A priority-inheritance futex holds its owner's tid in the word.
		w.Kind = "pi-mutex"
		owner := int(word & futexTIDMask)
		died := ""
		if word&futexOwnerDied != 0 {
			died = ", its previous owner died"
		}
		switch {
		case owner == 0:
			w.Desc = fmt.Sprintf("PI mutex %#x (owner unknown: the lock word holds no tid%s)", uaddr, died)
		case tids[owner]:
			w.Owner = owner
			w.Desc = fmt.Sprintf("PI mutex %#x held by tid %d%s", uaddr, owner, died)
		default:
			w.Desc = fmt.Sprintf("PI mutex %#x held by tid %d, not a thread of this process (a lock shared with another process)", uaddr, owner)
		}
		return w
	case futexWaitRequeuePI:
		w.Kind = "condvar"
		w.Desc = fmt.Sprintf("a signal on condition variable %#x (PI; a condition variable has no owner)", uaddr)
		return w
	case futexWait, futexWaitBitset:
	default:
		w.Desc = fmt.Sprintf("futex %#x (%s; owner unknown)", uaddr, futexOpName(a[1]))
		return w
	}
	if n >= 12 && (word == 1 || word == 2) {
		// glibc's normal mutex: 1 locked, 2 locked with waiters; the
		// owner's tid sits beside the word.
		owner := int(int32(binary.LittleEndian.Uint32(b[glibcMutexOwnerOffset:])))
		if owner > 0 && tids[owner] {
			w.Kind = "mutex"
			w.Owner = owner
			w.Desc = fmt.Sprintf("pthread mutex %#x held by tid %d", uaddr, owner)
			return w
		}
	}
	if tid := int(word & futexTIDMask); word&futexTIDMask > 2 && tids[tid] {
		if word == val && word&^futexTIDMask == 0 {
			// pthread_join sleeps on the joined thread's tid field
			// until the kernel clears it at that thread's exit.
			w.Kind = "join"
			w.Owner = tid
			w.Desc = fmt.Sprintf("tid %d to exit (pthread_join)", tid)
			return w
		}
		// Robust and error-checking mutexes keep the owner in the word.
		w.Kind = "mutex"
		w.Owner = tid
		w.Desc = fmt.Sprintf("mutex %#x held by tid %d (owner in the lock word)", uaddr, tid)
		return w
	}
	switch {
	case word != val:
		w.Desc = fmt.Sprintf("futex %#x (owner unknown: its value changed from %d to %d, the wait is ending)", uaddr, val, word)
	default:
		w.Desc = fmt.Sprintf("futex %#x = %d (owner unknown: not a pthread mutex with a recorded owner)", uaddr, word)
	}
	return w
}

// refineByStack names what a futex wait is from the functions on the
// stack, when the futex word alone could not: a condition variable has no
// owner, neither has a semaphore; and a "join" guess that the stack does
// not confirm is dropped.
func refineByStack(w *Wait, names []string) {
	if w == nil || w.Addr == 0 {
		return
	}
	has := func(subs ...string) bool {
		for _, n := range names {
			for _, s := range subs {
				if strings.Contains(n, s) {
					return true
				}
			}
		}
		return false
	}
	switch {
	case w.Kind == "join" && len(names) > 0 && !has("pthread_join", "pthread_clockjoin", "pthread_timedjoin", "pthread_tryjoin"):
		w.Kind, w.Owner = "futex", 0
		w.Desc = fmt.Sprintf("futex %#x (owner unknown: its value looks like a tid, but the stack is not pthread_join)", w.Addr)
	case w.Owner == 0 && has("pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait"):
		w.Kind = "condvar"
		w.Desc = fmt.Sprintf("a signal on the condition variable near %#x (a condition variable has no owner)", w.Addr)
	case w.Owner == 0 && has("sem_wait", "sem_timedwait", "sem_clockwait"):
		w.Kind = "semaphore"
		w.Desc = fmt.Sprintf("a post on semaphore %#x (a semaphore has no owner)", w.Addr)
	case w.Owner == 0 && has("pthread_rwlock_"):
		w.Kind = "rwlock"
		w.Desc = fmt.Sprintf("rwlock near %#x (owner unknown: readers are not recorded)", w.Addr)
	}
}

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
// edge, and cycles are found by following them. Take fills
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
