// Command sleeper prints "ready" and sleeps until killed. Tests start it in
// places a process can be (a chroot, another user) and inspect it from
// outside. It is built static (CGO_ENABLED=0) so it runs inside an empty
// chroot.
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
