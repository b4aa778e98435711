// Command spin burns CPU on N threads in one named function, main.spinHot,
// called through main.spinMiddle (recursive, -depth deep) from
// main.spinWorker, so a profiler must show spinHot on top with its callers
// beneath. Each spinning thread is an OS thread of its own named spin-<i>.
//
// It prints "ready" once every thread spins, then, with -report, a line
// "work ITERATIONS CPU_NS" every interval: the spinHot calls so far and the
// process's CPU time, so a benchmark can measure work per CPU second.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

type counter struct {
	n atomic.Uint64
	_ [56]byte // one cache line each
}

var sink atomic.Uint64

//go:noinline
func spinHot(seed uint64) uint64 {
	x := seed | 1
	for i := 0; i < 2000; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

//go:noinline
func spinMiddle(depth int, seed uint64, c *counter) uint64 {
	if depth > 0 {
		return spinMiddle(depth-1, seed, c) + 1
	}
	for i := 0; i < 64; i++ {
		seed = spinHot(seed)
		c.n.Add(1)
	}
	return seed
}

//go:noinline
func spinWorker(i, depth int, c *counter, started *sync.WaitGroup) {
	runtime.LockOSThread() // never unlocked: this goroutine owns its thread
	setThreadName(fmt.Sprintf("spin-%d", i))
	started.Done()
	seed := uint64(i + 1)
	for {
		seed = spinMiddle(depth, seed, c)
		sink.Store(seed)
	}
}

func setThreadName(name string) {
	b := append([]byte(name), 0)
	const prSetName = 15
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetName, uintptr(unsafe.Pointer(&b[0])), 0)
}

func processCPU() uint64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return uint64(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	threads := flag.Int("threads", 4, "spinning threads")
	depth := flag.Int("depth", 3, "spinMiddle frames between spinWorker and spinHot")
	duration := flag.Duration("duration", 0, "exit after this long (0: run until killed)")
	report := flag.Duration("report", 0, "print \"work ITERATIONS CPU_NS\" this often (0: never)")
	flag.Parse()
	// Every spinner is runnable at once: the kernel, not Go's scheduler,
	// shares the CPUs among them.
	runtime.GOMAXPROCS(*threads + 2)
	counters := make([]counter, *threads)
	var started sync.WaitGroup
	started.Add(*threads)
	for i := range counters {
		go spinWorker(i, *depth, &counters[i], &started)
	}
	started.Wait()
	fmt.Println("ready")
	var deadline <-chan time.Time
	if *duration > 0 {
		deadline = time.After(*duration)
	}
	var tick <-chan time.Time
	if *report > 0 {
		tick = time.Tick(*report)
	}
	for {
		select {
		case <-deadline:
			os.Exit(0)
		case <-tick:
			var total uint64
			for i := range counters {
				total += counters[i].n.Load()
			}
			fmt.Printf("work %d %d\n", total, processCPU())
		}
	}
}
