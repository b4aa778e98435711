// Command demo is the target of `make demo`: a small "bank" service that
// beats a heartbeat file while it is healthy and then freezes the way real
// services do. Two transfer threads take the two account locks in opposite
// order and deadlock; the heartbeat writer needs one of those locks and
// stops; a reconciler thread keeps spinning on the CPU, looking busy.
//
// The locks are futex-based mutexes laid out like glibc's pthread_mutex_t
// (lock word, count, owner tid), so that stallwatch names the owner of a
// lock as it does for C, C++, Rust and Julia programs. Every role runs on a
// thread of its own with a name (prctl PR_SET_NAME), so the capture reads
// like a thread dump.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// mutex mirrors the first fields of glibc's pthread_mutex_t on x86-64:
// __lock (the futex word: 0 free, 1 locked, 2 locked with waiters),
// __count, __owner (the holder's tid).
type mutex struct {
	word  uint32
	count uint32
	owner int32
	_     [7]int32 // the rest of a pthread_mutex_t (40 bytes)
}

const (
	futexWaitPrivate = 0 | 128
	futexWakePrivate = 1 | 128
)

func futex(addr *uint32, op, val uintptr) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), op, val, 0, 0, 0)
}

// Lock is Drepper's "futexes are tricky" mutex, take 3.
func (m *mutex) Lock() {
	if !atomic.CompareAndSwapUint32(&m.word, 0, 1) {
		for atomic.SwapUint32(&m.word, 2) != 0 {
			futex(&m.word, futexWaitPrivate, 2)
		}
	}
	atomic.StoreInt32(&m.owner, int32(syscall.Gettid()))
}

func (m *mutex) Unlock() {
	atomic.StoreInt32(&m.owner, 0)
	if atomic.AddUint32(&m.word, ^uint32(0)) != 0 {
		atomic.StoreUint32(&m.word, 0)
		futex(&m.word, futexWakePrivate, 1)
	}
}

type account struct {
	mu      mutex
	balance int64
}

var (
	checking = &account{balance: 1000}
	savings  = &account{balance: 1000}
	work     atomic.Uint64
)

// The main goroutine keeps the main thread, so that the process's own name
// stays "demo" and every role gets a thread of its own.
func init() { runtime.LockOSThread() }

// onThread runs f on an OS thread of its own named name.
func onThread(name string, f func()) {
	go func() {
		runtime.LockOSThread()
		setThreadName(name)
		f()
	}()
}

func setThreadName(name string) {
	b := append([]byte(name), 0)
	syscall.Syscall(syscall.SYS_PRCTL, syscall.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0)
}

//go:noinline
func transferCheckingToSavings(amount int64, pause time.Duration) {
	checking.mu.Lock()
	time.Sleep(pause) // long enough for the other transfer to take savings
	savings.mu.Lock()
	checking.balance -= amount
	savings.balance += amount
	savings.mu.Unlock()
	checking.mu.Unlock()
}

//go:noinline
func transferSavingsToChecking(amount int64, pause time.Duration) {
	savings.mu.Lock()
	time.Sleep(pause)
	checking.mu.Lock()
	savings.balance -= amount
	checking.balance += amount
	checking.mu.Unlock()
	savings.mu.Unlock()
}

// writeHeartbeat records the total balance in the heartbeat file; it needs
// the checking account's lock, so it stops when the transfers deadlock.
//
//go:noinline
func writeHeartbeat(path string) error {
	checking.mu.Lock()
	total := checking.balance + savings.balance
	checking.mu.Unlock()
	msg := fmt.Sprintf("%s total=%d work=%d\n", time.Now().Format(time.RFC3339Nano), total, work.Load())
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(msg), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// reconcile spins on the CPU forever: the busy thread in the capture.
//
//go:noinline
func reconcile() {
	x := uint64(1)
	for {
		for i := 0; i < 1_000_000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		work.Add(x & 1)
	}
}

func main() {
	beat := flag.String("heartbeat", "demo.beat", "heartbeat file to touch")
	every := flag.Duration("every", 200*time.Millisecond, "heartbeat interval")
	healthy := flag.Duration("healthy-for", 3*time.Second, "how long to run healthy before the deadlock")
	flag.Parse()

	onThread("heartbeat", func() {
		for {
			if err := writeHeartbeat(*beat); err != nil {
				fmt.Fprintln(os.Stderr, "demo:", err)
				os.Exit(1)
			}
			time.Sleep(*every)
		}
	})
	onThread("reconciler", reconcile)
	fmt.Printf("ready pid %d: beating %s every %v; deadlock in %v\n", os.Getpid(), *beat, *every, *healthy)

	time.Sleep(*healthy)
	fmt.Println("deadlocking: transfer threads take the account locks in opposite order")
	onThread("transfer-c2s", func() { transferCheckingToSavings(10, 100*time.Millisecond) })
	onThread("transfer-s2c", func() { transferSavingsToChecking(10, 100*time.Millisecond) })
	select {}
}
