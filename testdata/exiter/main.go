// Command exiter runs a few busy threads and one blocked thread, prints
// "ready", and exits with -code after -after: a target that disappears in
// the middle of a recording. With -stdin the delay starts when a line (or
// EOF) arrives on standard input, so a test decides when.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"
)

var sink atomic.Uint64

//go:noinline
func exiterBusy() {
	runtime.LockOSThread()
	x := uint64(1)
	for {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		sink.Store(x)
	}
}

func main() {
	after := flag.Duration("after", time.Second, "exit this long after ready")
	threads := flag.Int("threads", 2, "busy threads")
	code := flag.Int("code", 0, "exit status")
	onStdin := flag.Bool("stdin", false, "start the delay when a line or EOF arrives on stdin")
	flag.Parse()
	runtime.GOMAXPROCS(*threads + 2)
	for i := 0; i < *threads; i++ {
		go exiterBusy()
	}
	go func() {
		runtime.LockOSThread()
		select {} // blocked for good
	}()
	fmt.Println("ready")
	if *onStdin {
		bufio.NewReader(os.Stdin).ReadString('\n')
	}
	time.Sleep(*after)
	fmt.Println("exiting")
	os.Exit(*code)
}
