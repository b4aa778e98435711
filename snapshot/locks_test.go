package snapshot

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/model"
)

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
			th := &model.Thread{TID: 100, Syscall: &model.Syscall{Nr: sysFutex, Args: [6]uint64{addr, tc.op, tc.val}}}
			w := futexWaitOf(th, tc.mem, tids)
			if w.Kind != tc.kind || w.Owner != tc.owner || !strings.Contains(w.Desc, tc.desc) || w.Addr != addr {
				t.Errorf("got %+v, want kind %s owner %d desc ~ %q", *w, tc.kind, tc.owner, tc.desc)
			}
		})
	}
}

func TestRefineByStack(t *testing.T) {
	tests := []struct {
		in    model.Wait
		names []string
		kind  string
		owner int
	}{
		{model.Wait{Kind: "futex", Addr: 1}, []string{"__futex_abstimed_wait_common", "___pthread_cond_wait", "consumer"}, "condvar", 0},
		{model.Wait{Kind: "futex", Addr: 1}, []string{"do_futex_wait", "__new_sem_wait_slow64", "sem_wait"}, "semaphore", 0},
		{model.Wait{Kind: "join", Addr: 1, Owner: 7}, []string{"__futex_abstimed_wait_common", "__pthread_clockjoin_ex", "main"}, "join", 7},
		{model.Wait{Kind: "join", Addr: 1, Owner: 7}, []string{"__futex_abstimed_wait_common", "consumer"}, "futex", 0},
		{model.Wait{Kind: "mutex", Addr: 1, Owner: 7}, []string{"___pthread_cond_wait"}, "mutex", 7},
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
		s := &model.Syscall{Nr: tc.nr, Name: syscallName(tc.nr), Args: tc.args}
		w, _ := describe(s, mem, linkNamer(1<<22))
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
