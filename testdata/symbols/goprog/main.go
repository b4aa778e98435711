// goprog is a Go target for symbolize's tests: it prints return addresses
// taken in its own functions, with what the Go runtime says they are (the
// truth to compare against), then waits.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

//go:noinline
func callerPCs() []uintptr {
	pcs := make([]uintptr, 16)
	n := runtime.Callers(2, pcs) // skip runtime.Callers and callerPCs
	return pcs[:n]
}

// inlinedStep is small enough to be inlined into stallingWork.
func inlinedStep() []uintptr { return callerPCs() }

//go:noinline
func stallingWork() []uintptr {
	return inlinedStep()
}

func main() {
	pcs := stallingWork()
	// runtime.Callers gives one PC per logical frame; the frames of
	// functions inlined into another share its physical return address,
	// the first PC of their group. A frame whose Func is nil was inlined
	// into the next one.
	frames := runtime.CallersFrames(pcs)
	start, i := 0, 0
	var group []string
	for {
		f, more := frames.Next()
		group = append(group, fmt.Sprintf("%s %s %d", f.Function, f.File, f.Line))
		if f.Func != nil {
			if strings.HasPrefix(f.Function, "main.") {
				fmt.Printf("ret %#x %s\n", pcs[start], strings.Join(group, " | "))
			}
			start, group = i+1, nil
		}
		i++
		if !more || i >= len(pcs) {
			break
		}
	}
	fmt.Println("ready")
	os.Stdout.Sync()
	for {
		time.Sleep(time.Hour)
	}
}
