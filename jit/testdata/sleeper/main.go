// Command sleeper is a target for discovery tests that must run where no
// libc exists (a chroot): it prints "ready <pid>" and sleeps until killed.
package main

import (
	"fmt"
	"os"
	"time"
)

func main() {
	fmt.Printf("ready %d\n", os.Getpid())
	for {
		time.Sleep(time.Hour)
	}
}
