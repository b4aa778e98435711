package watchdog

import (
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// watchExit returns a channel closed when process pid exits (or at once if
// it is already gone), and a function that stops watching. pid 0 gives a
// channel that never closes.
//
// It waits on a pidfd through Go's poller, which costs nothing while the
// target lives; kernels without pidfd (before 5.3) are polled every second.
func watchExit(pid int) (<-chan struct{}, func()) {
	done := make(chan struct{})
	if pid == 0 {
		return done, func() {}
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err == unix.ESRCH {
		close(done)
		return done, func() {}
	}
	if err != nil {
		return pollExit(pid, done)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return pollExit(pid, done)
	}
	go func() {
		// Read waits for the pidfd to be readable (the process exited)
		// and returns early with an error when f is closed.
		err := rc.Read(func(fd uintptr) bool {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, _ := unix.Poll(fds, 0)
			return n > 0
		})
		if err == nil {
			close(done)
		}
	}()
	return done, func() { f.Close() }
}

func pollExit(pid int, done chan struct{}) (<-chan struct{}, func()) {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if !procfs.Alive(pid) {
					close(done)
					return
				}
			}
		}
	}()
	return done, func() { close(stop) }
}
