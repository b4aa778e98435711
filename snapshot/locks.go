package snapshot

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/model"
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
func futexWaitOf(t *model.Thread, mem unwind.Memory, tids map[int]bool) *model.Wait {
	a := t.Syscall.Args
	uaddr, cmd, val := a[0], a[1]&futexCmdMask, uint32(a[2])
	w := &model.Wait{Kind: "futex", Addr: uaddr}
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
func refineByStack(w *model.Wait, names []string) {
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
