// goblocked: a Go program with a goroutine locked to its OS thread and
// blocked in read(2) on a pipe inside main.blockInRead, for unwinding Go
// code, which has frame pointers but no .eh_frame. Prints "ready TID".
package main

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// init keeps the main goroutine on the main thread, so that the reader is
// on another: a ptrace stop of the main thread would be reported to the
// test that started us as if we had stopped.
func init() { runtime.LockOSThread() }

//go:noinline
func blockInRead(fd int) {
	var b [1]byte
	syscall.Read(fd, b[:])
}

//go:noinline
func reader(fd int, tid chan<- int) {
	runtime.LockOSThread()
	tid <- syscall.Gettid()
	blockInRead(fd)
}

func main() {
	r, _, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	tid := make(chan int)
	go reader(int(r.Fd()), tid)
	fmt.Printf("ready %d\n", <-tid)
	select {}
}
