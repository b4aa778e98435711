package procwatch

import (
	"io/fs"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// CmdlineReader reads processes' command lines for a caller that looks
// at every exec of the host (a daemon's rules): one open, read and close
// a process, into a buffer it keeps, and nothing allocated — at 200 execs
// a second, a fresh buffer of the patterns' need (128 KiB for an
// unanchored one) each was most of what the idle daemon's garbage
// collector did. The zero value is ready; it is not safe for concurrent
// use.
type CmdlineReader struct {
	buf  []byte
	path []byte
	err  cmdlineError
}

// Read returns the first n bytes of process pid's command line, its
// arguments joined by spaces as Facts.CommandLine joins them (the
// terminating NUL dropped); empty for a kernel thread or a zombie. The
// bytes, and the error, are valid until the next Read. A process that is
// gone is procfs.ErrGone (most of a host's execs are gone by the time
// they are read: the error allocates nothing either).
func (r *CmdlineReader) Read(pid, n int) ([]byte, error) {
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	r.path = append(strconv.AppendInt(append(append(r.path[:0], procfs.Root...), '/'), int64(pid), 10), "/cmdline\x00"...)
	fd, err := openRead(r.path)
	if err != nil {
		return nil, r.fail(pid, "open", err)
	}
	defer syscall.Close(fd)
	got := 0
	for got < n {
		m, err := syscall.Read(fd, b[got:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, r.fail(pid, "read", err)
		}
		if m == 0 {
			break
		}
		got += m
	}
	b = b[:got]
	if got > 0 && b[got-1] == 0 {
		b = b[:got-1]
	}
	for i, c := range b {
		if c == 0 {
			b[i] = ' '
		}
	}
	return b, nil
}

// openRead opens the NUL-terminated path for reading: syscall.Open would
// copy the path into a new string's bytes at each call.
func openRead(path []byte) (int, error) {
	for {
		fd, _, errno := syscall.Syscall6(syscall.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(&path[0])), uintptr(syscall.O_RDONLY|syscall.O_CLOEXEC), 0, 0, 0)
		switch errno {
		case 0:
			return int(fd), nil
		case syscall.EINTR:
			continue
		}
		return -1, errno
	}
}

// atFDCWD is AT_FDCWD (a path relative to the working directory, or
// absolute), as the system call takes it.
var atFDCWD = -100

// fail is the error of a read of pid's command line.
func (r *CmdlineReader) fail(pid int, op string, err error) error {
	r.err = cmdlineError{pid: pid, op: op, err: err}
	return &r.err
}

// cmdlineError is a failed read of a command line: it names the file
// (formatted when asked), and is procfs.ErrGone for a process that
// exited.
type cmdlineError struct {
	pid int
	op  string
	err error
}

func (e *cmdlineError) Error() string {
	return (&fs.PathError{Op: e.op, Path: procfs.PidPath(e.pid, "cmdline"), Err: e.err}).Error()
}

func (e *cmdlineError) Unwrap() error { return e.err }

func (e *cmdlineError) Is(target error) bool {
	return target == procfs.ErrGone && (e.err == syscall.ENOENT || e.err == syscall.ESRCH)
}
