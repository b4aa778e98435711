// Command gostw stops the world and never gets it: one goroutine spins in a
// loop Go cannot preempt (run it with GODEBUG=asyncpreemptoff=1: a loop
// without function calls has no preemption point then), another calls
// runtime.GC, whose stop-the-world (runtime.stopTheWorldWithSema) waits
// for the spinner forever, and every other goroutine that needs the
// scheduler stops with it.
//
// It prints "ready <pid>" once the spinner runs, then "collecting" before
// it calls runtime.GC.
package main

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"
)

var (
	counter uint64
	started atomic.Bool
)

//go:noinline
func spin() {
	started.Store(true)
	for {
		counter++ // no call, no preemption point
	}
}

//go:noinline
func collect() {
	fmt.Println("collecting")
	runtime.GC()
	fmt.Println("collected") // never, while spin runs
}

func main() {
	if os.Getenv("GODEBUG") != "asyncpreemptoff=1" {
		fmt.Fprintln(os.Stderr, "gostw: run with GODEBUG=asyncpreemptoff=1")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(2)
	go spin()
	for !started.Load() {
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("ready %d\n", os.Getpid())
	go func() {
		for {
			time.Sleep(10 * time.Millisecond) // a ticker that stops with the world
		}
	}()
	collect()
}
