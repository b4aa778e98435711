package attach

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/perms"
)

// asUser runs f with the effective (and filesystem) uid and gid the JVM
// has, on a thread of its own: a file f creates is owned by the JVM's
// user, a socket f connects carries its credentials. The thread is never
// handed back to the Go scheduler (the goroutine exits locked to it, so
// the runtime ends it): no other goroutine ever runs with the switched
// credentials. syscall.Setresuid would not do: since Go 1.16 it changes
// every thread of the process.
func asUser(uid, gid uint32, f func() error) error {
	if int(uid) == os.Geteuid() && int(gid) == os.Getegid() {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := switchThread(uid, gid); err != nil {
			errc <- err
			return
		}
		errc <- f()
	}()
	return <-errc
}

// switchThread sets this thread's effective ids (setresgid then setresuid,
// the real and saved ids unchanged).
func switchThread(uid, gid uint32) error {
	const keep = ^uintptr(0) // -1: leave as is
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(gid), keep); e != 0 {
		return &UserError{UID: uid, GID: gid, Err: perms.Explain(perms.ActAsGroup, fmt.Sprintf("setresgid %d", gid), e)}
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
		return &UserError{UID: uid, GID: gid, Err: perms.Explain(perms.ActAsUser, fmt.Sprintf("setresuid %d", uid), e)}
	}
	return nil
}

// UserError says stallwatch could not act as the JVM's user; Err says
// why, and for a refusal what is missing and how to have it (package
// perms), to which running as the JVM's user adds one way.
type UserError struct {
	UID, GID uint32
	Err      error
}

func (e *UserError) Error() string {
	msg := fmt.Sprintf("act as the JVM's uid %d gid %d (stallwatch is uid %d): %v", e.UID, e.GID, os.Geteuid(), e.Err)
	if errors.As(e.Err, new(*perms.Error)) {
		msg += fmt.Sprintf(", or run stallwatch as uid %d", e.UID)
	}
	return msg
}

func (e *UserError) Unwrap() error { return e.Err }
