package snapshot

import (
	"fmt"
	"io/fs"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"golang.org/x/sys/unix"
)

// taskFiles reads the /proc files of one thread (status, wchan,
// schedstat, syscall, stack, stat, sched: seven a thread, two of them
// twice) in as few system calls as they allow: the thread's directory is
// opened once and each file relative to it (the path walk of
// /proc/<pid>/task/<tid>/ for each file cost as much as its read), each
// is read with a single read into the worker's buffer (a /proc file of
// these is a seq_file, generated whole at the first read: a read that
// does not fill the buffer has all of it), and the two files read again
// to prove a sleeping thread did not run (asleep.go) are kept open and
// read again with pread at offset 0, which has the kernel generate them
// anew.
type taskFiles struct {
	pid, tid int
	dir      int // the thread's directory (O_PATH), or -1
	buf      []byte
	// kept are the descriptors of the files read again (syscall,
	// schedstat), or -1.
	kept [2]int
}

// Files kept open for a second read.
const (
	keptSyscall = iota
	keptSchedstat
)

var keptNames = [...]string{keptSyscall: "syscall", keptSchedstat: "schedstat"}

// taskBufSize holds any of the files but a deep kernel stack or a sched
// file of a kernel with many more fields than today's (those are read
// whole the usual way).
const taskBufSize = 16 << 10

// openTask opens thread tid's directory; buf is the caller's, reused by
// every read.
func openTask(pid, tid int, buf []byte) (*taskFiles, error) {
	f := &taskFiles{pid: pid, tid: tid, dir: -1, buf: buf, kept: [2]int{-1, -1}}
	path := procfs.TaskPath(pid, tid)
	fd, err := openIgnoringEINTR(unix.AT_FDCWD, path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, pathErr("open", path, err)
	}
	f.dir = fd
	return f, nil
}

// close closes every descriptor the thread's files hold.
func (f *taskFiles) close() {
	for i, fd := range f.kept {
		if fd >= 0 {
			unix.Close(fd)
			f.kept[i] = -1
		}
	}
	if f.dir >= 0 {
		unix.Close(f.dir)
		f.dir = -1
	}
}

// read returns the contents of the thread's file name, valid until the
// next read.
func (f *taskFiles) read(name string) ([]byte, error) {
	fd, err := openIgnoringEINTR(f.dir, name, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, pathErr("open", f.path(name), err)
	}
	defer unix.Close(fd)
	return f.readFD(fd, name)
}

// readKept is read, keeping the file open for reread.
func (f *taskFiles) readKept(which int) ([]byte, error) {
	name := keptNames[which]
	if f.kept[which] < 0 {
		fd, err := openIgnoringEINTR(f.dir, name, unix.O_RDONLY|unix.O_CLOEXEC)
		if err != nil {
			return nil, pathErr("open", f.path(name), err)
		}
		f.kept[which] = fd
	}
	return f.readFD(f.kept[which], name)
}

// readFD reads the whole of a file at offset 0.
func (f *taskFiles) readFD(fd int, name string) ([]byte, error) {
	for {
		n, err := unix.Pread(fd, f.buf, 0)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, pathErr("read", f.path(name), err)
		case n == len(f.buf):
			// Larger than the buffer: read it whole.
			return procfs.ReadLimited(f.path(name), 1<<20)
		}
		return f.buf[:n], nil
	}
}

func (f *taskFiles) path(name string) string { return procfs.TaskPath(f.pid, f.tid, name) }

func openIgnoringEINTR(dir int, path string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dir, path, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// pathErr is a failed operation on a /proc file, as procfs says it: a
// thread gone is procfs.ErrGone; a refusal keeps its errno for
// perms.IsPermission.
func pathErr(op, path string, errno error) error {
	err := error(&fs.PathError{Op: op, Path: path, Err: errno})
	if errno == unix.ENOENT || errno == unix.ESRCH {
		return fmt.Errorf("%w: %w", procfs.ErrGone, err)
	}
	return err
}
