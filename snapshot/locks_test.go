package snapshot

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/unwind"
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

// mutexMem lays out a futex word and the pthread_mutex_t owner beside it.
func mutexMem(addr uint64, word, owner uint32) unwind.Memory {
	b := make([]byte, 40)
	binary.LittleEndian.PutUint32(b[0:], word)
	binary.LittleEndian.PutUint32(b[8:], owner)
	return unwind.DumpMemory(addr, b)
}

func TestFutexWaitOf(t *testing.T) {
	const addr = 0x7f0010
	tids := map[int]bool{100: true, 101: true, 102: true}
	tests := []struct {
		name  string
		op    uint64
		val   uint64
		mem   unwind.Memory
		kind  string
		owner int
		desc  string
	}{
		{"glibc mutex with waiters", futexWait | futexPrivate, 2, mutexMem(addr, 2, 101), "mutex", 101, "pthread mutex 0x7f0010 held by tid 101"},
		{"glibc mutex, owner not ours", futexWait | futexPrivate, 2, mutexMem(addr, 2, 555), "futex", 0, "owner unknown"},
		{"PI futex", futexLockPI | futexPrivate, 0, mutexMem(addr, 0x80000000|102, 0), "pi-mutex", 102, "PI mutex 0x7f0010 held by tid 102"},
		{"PI futex of another process", futexLockPI2, 0, mutexMem(addr, 4242, 0), "pi-mutex", 0, "not a thread of this process"},
		{"PI owner died", futexLockPI, 0, mutexMem(addr, futexOwnerDied, 0), "pi-mutex", 0, "previous owner died"},
		{"join", futexWaitBitset | futexRealtime, 100, mutexMem(addr, 100, 0), "join", 100, "tid 100 to exit"},
		{"robust owner in word", futexWait, 0x80000000 | 101, mutexMem(addr, 0x80000000|101, 0), "mutex", 101, "owner in the lock word"},
		{"condvar requeue PI", futexWaitRequeuePI, 0, mutexMem(addr, 0, 0), "condvar", 0, "no owner"},
		{"value changed", futexWait, 0, mutexMem(addr, 1, 0), "futex", 0, "the wait is ending"},
		{"plain futex", futexWait, 0, mutexMem(addr, 0, 0), "futex", 0, "owner unknown"},
		{"unreadable", futexWait, 2, unwind.DumpMemory(0, nil), "futex", 0, "not readable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			th := &Thread{TID: 100, Syscall: &Syscall{Nr: sysFutex, Args: [6]uint64{addr, tc.op, tc.val}}}
			w := futexWaitOf(th, tc.mem, tids)
			if w.Kind != tc.kind || w.Owner != tc.owner || !strings.Contains(w.Desc, tc.desc) || w.Addr != addr {
				t.Errorf("got %+v, want kind %s owner %d desc ~ %q", *w, tc.kind, tc.owner, tc.desc)
			}
		})
	}
}

func TestRefineByStack(t *testing.T) {
	tests := []struct {
		in    Wait
		names []string
		kind  string
		owner int
	}{
		{Wait{Kind: "futex", Addr: 1}, []string{"__futex_abstimed_wait_common", "___pthread_cond_wait", "consumer"}, "condvar", 0},
		{Wait{Kind: "futex", Addr: 1}, []string{"do_futex_wait", "__new_sem_wait_slow64", "sem_wait"}, "semaphore", 0},
		{Wait{Kind: "join", Addr: 1, Owner: 7}, []string{"__futex_abstimed_wait_common", "__pthread_clockjoin_ex", "main"}, "join", 7},
		{Wait{Kind: "join", Addr: 1, Owner: 7}, []string{"__futex_abstimed_wait_common", "consumer"}, "futex", 0},
		{Wait{Kind: "mutex", Addr: 1, Owner: 7}, []string{"___pthread_cond_wait"}, "mutex", 7},
	}
	for _, tc := range tests {
		w := tc.in
		refineByStack(&w, tc.names)
		if w.Kind != tc.kind || w.Owner != tc.owner {
			t.Errorf("%+v with stack %v: got kind %s owner %d, want %s %d", tc.in, tc.names, w.Kind, w.Owner, tc.kind, tc.owner)
		}
	}
}

func TestDescribe(t *testing.T) {
	ts := make([]byte, 16)
	binary.LittleEndian.PutUint64(ts, 3)
	binary.LittleEndian.PutUint64(ts[8:], 500_000_000)
	mem := unwind.DumpMemory(0x1000, ts)
	tests := []struct {
		nr   int
		args [6]uint64
		desc string
		wait string
	}{
		{sysFutex, [6]uint64{0x7f10, futexWait | futexPrivate}, "futex(0x7f10 FUTEX_WAIT_PRIVATE)", ""},
		{sysFutex, [6]uint64{0x7f10, futexWaitBitset | futexRealtime}, "futex(0x7f10 FUTEX_WAIT_BITSET|FUTEX_CLOCK_REALTIME)", ""},
		{sysNanosleep, [6]uint64{0x1000}, "nanosleep(3.5s)", "a timeout: nanosleep(3.5s)"},
		{sysClockNanosleep, [6]uint64{1, 1, 0x1000}, "clock_nanosleep(until 3.5s)", "a timeout: clock_nanosleep(until 3.5s)"},
		{sysRead, [6]uint64{1 << 30}, "read(fd 1073741824 → unknown (gone))", "read() on fd 1073741824 → unknown (gone)"},
		{sysWait4, [6]uint64{^uint64(0)}, "wait4(pid -1)", "a child process: wait4(pid -1)"},
		{sysPause, [6]uint64{}, "pause()", "a signal: pause()"},
		{sysPoll, [6]uint64{0x1000, 0}, "poll(no fds)", "poll(no fds)"},
		{9999, [6]uint64{1, 2, 3}, "syscall_9999(0x1, 0x2, 0x3)", "syscall_9999(0x1, 0x2, 0x3) to return"},
	}
	for _, tc := range tests {
		s := &Syscall{Nr: tc.nr, Name: syscallName(tc.nr), Args: tc.args}
		w := describe(1<<22, s, mem)
		if s.Desc != tc.desc {
			t.Errorf("syscall %d: desc %q, want %q", tc.nr, s.Desc, tc.desc)
		}
		got := ""
		if w != nil {
			got = w.Desc
		}
		if got != tc.wait {
			t.Errorf("syscall %d: wait %q, want %q", tc.nr, got, tc.wait)
		}
	}
}
