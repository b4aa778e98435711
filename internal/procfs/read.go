package procfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Root is the mount point of procfs. Tests may point it elsewhere.
var Root = "/proc"

// ErrGone reports that the process or thread no longer exists.
var ErrGone = errors.New("process or thread has exited")

// DefaultLimit bounds a single /proc file read (a maps file of a large JVM is
// a few MiB; nothing else comes near).
const DefaultLimit = 64 << 20

// ReadLimited reads at most limit bytes of path. A file larger than limit is
// an error that names it, not a silent truncation.
//
// It reads with plain system calls, not an os.File: a /proc file cannot be
// polled, and os.Open's attempt to register it with Go's poller costs as
// much as the read (a daemon reads /proc for every process it discovers).
func ReadLimited(path string, limit int64) ([]byte, error) {
	fd, err := ignoringEINTR(func() (int, error) { return syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0) })
	if err != nil {
		return nil, wrapGone(&fs.PathError{Op: "open", Path: path, Err: err})
	}
	defer syscall.Close(fd)
	b := make([]byte, 0, min(limit+1, 4096))
	for int64(len(b)) <= limit {
		if len(b) == cap(b) {
			b = slices.Grow(b, int(min(int64(cap(b)), limit+1-int64(len(b)))))
		}
		n, err := ignoringEINTR(func() (int, error) { return syscall.Read(fd, b[len(b):cap(b)]) })
		if err != nil {
			return nil, wrapGone(fmt.Errorf("read %s: %w", path, &fs.PathError{Op: "read", Path: path, Err: err}))
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
	return nil, fmt.Errorf("read %s: larger than %d bytes", path, limit)
}

// ReadPrefix reads the first n bytes of path, or all of it when shorter,
// and never more: for a file whose whole is not needed and can be large
// (a command line of megabytes, copied out of the process's memory by
// the kernel at each read).
func ReadPrefix(path string, n int) ([]byte, error) {
	fd, err := ignoringEINTR(func() (int, error) { return syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0) })
	if err != nil {
		return nil, wrapGone(&fs.PathError{Op: "open", Path: path, Err: err})
	}
	defer syscall.Close(fd)
	b := make([]byte, n)
	got := 0
	for got < n {
		m, err := ignoringEINTR(func() (int, error) { return syscall.Read(fd, b[got:]) })
		if err != nil {
			return nil, wrapGone(fmt.Errorf("read %s: %w", path, &fs.PathError{Op: "read", Path: path, Err: err}))
		}
		if m == 0 {
			break
		}
		got += m
	}
	return b[:got], nil
}

// ReadInto reads path into buf, reusing its storage: a caller reading
// thousands of small files (a stat file per thread) allocates nothing per
// file. A file that does not fit in cap(buf) is an error that names it.
func ReadInto(path string, buf []byte) ([]byte, error) {
	fd, err := ignoringEINTR(func() (int, error) { return syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0) })
	if err != nil {
		return nil, wrapGone(&fs.PathError{Op: "open", Path: path, Err: err})
	}
	defer syscall.Close(fd)
	b := buf[:0]
	var probe [1]byte
	for {
		dst := b[len(b):cap(b)]
		if len(dst) == 0 {
			dst = probe[:] // full: only the end of the file may follow
		}
		n, err := ignoringEINTR(func() (int, error) { return syscall.Read(fd, dst) })
		if n > 0 && len(b) == cap(b) {
			return nil, fmt.Errorf("read %s: larger than %d bytes", path, cap(b))
		}
		if err != nil {
			return nil, wrapGone(&fs.PathError{Op: "read", Path: path, Err: err})
		}
		if n == 0 {
			return b, nil
		}
		b = b[:len(b)+n]
	}
}

func ignoringEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != syscall.EINTR {
			return n, err
		}
	}
}

// wrapGone turns the errors a vanished /proc entry produces into ErrGone
// (keeping the original for the message).
func wrapGone(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%w: %w", ErrGone, err)
	}
	return err
}

// PidPath returns /proc/<pid>/<elem...>.
func PidPath(pid int, elem ...string) string {
	return filepath.Join(append([]string{Root, strconv.Itoa(pid)}, elem...)...)
}

// TaskPath returns /proc/<pid>/task/<tid>/<elem...>.
func TaskPath(pid, tid int, elem ...string) string {
	return filepath.Join(append([]string{Root, strconv.Itoa(pid), "task", strconv.Itoa(tid)}, elem...)...)
}

func readPid(pid int, name string) ([]byte, error) {
	return ReadLimited(PidPath(pid, name), DefaultLimit)
}

func readTask(pid, tid int, name string) ([]byte, error) {
	return ReadLimited(TaskPath(pid, tid, name), 1<<20)
}

// Alive reports whether the process pid lives: some thread of it exists
// and is not a zombie. A process whose main thread exited while others
// run (pthread_exit in main) is alive; a zombie waiting to be reaped is
// not.
func Alive(pid int) bool {
	_, err := Via(pid)
	return err == nil
}

// Threads lists the thread ids of pid, in the order /proc gives them.
func Threads(pid int) ([]int, error) {
	ents, err := os.ReadDir(PidPath(pid, "task"))
	if err != nil {
		return nil, wrapGone(err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid > 0 {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// Comm returns a thread's name (the kernel keeps at most 15 bytes).
func Comm(pid, tid int) (string, error) {
	b, err := readTask(pid, tid, "comm")
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// Cmdline returns the process's arguments.
func Cmdline(pid int) ([]string, error) {
	b, err := ReadLimited(PidPath(pid, "cmdline"), 1<<20)
	if err != nil {
		return nil, err
	}
	return splitCmdline(b), nil
}

// CmdlinePrefix is the command line's first n bytes as arguments (the
// last one cut where the n bytes end): what selecting by a pattern that
// needs no more reads.
func CmdlinePrefix(pid, n int) ([]string, error) {
	b, err := ReadPrefix(PidPath(pid, "cmdline"), n)
	if err != nil {
		return nil, err
	}
	return splitCmdline(b), nil
}

func splitCmdline(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\x00")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x00")
}

// Environ returns the process's initial environment as a map. Later
// setenv calls by the target are not visible here.
func Environ(pid int) (map[string]string, error) {
	b, err := ReadLimited(PidPath(pid, "environ"), 4<<20)
	if err != nil {
		return nil, err
	}
	env := make(map[string]string)
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	return env, nil
}

// Exe returns the target's executable path as the kernel names it (in the
// target's mount namespace).
func Exe(pid int) (string, error) {
	p, err := os.Readlink(PidPath(pid, "exe"))
	return p, wrapGone(err)
}

// Cwd returns the target's working directory (in its mount namespace).
func Cwd(pid int) (string, error) {
	p, err := os.Readlink(PidPath(pid, "cwd"))
	return p, wrapGone(err)
}

// FdTarget returns what fd of pid refers to: a path, "socket:[ino]",
// "pipe:[ino]", "anon_inode:[eventfd]", ...
func FdTarget(pid, fd int) (string, error) {
	p, err := os.Readlink(PidPath(pid, "fd", strconv.Itoa(fd)))
	return p, wrapGone(err)
}

// Via returns the id to read pid's process-wide /proc files through
// (maps, root, cwd, environ, exe, mem, map_files): pid itself, or, when
// its main thread has exited while others run (pthread_exit in main),
// one of the live threads. A zombie main thread's own files are empty or
// unreadable, while /proc/<tid>, for any thread, shows the same process.
// ErrGone when no thread lives.
func Via(pid int) (int, error) {
	st, err := ReadStat(pid, pid)
	if err != nil {
		return 0, err
	}
	if st.State != 'Z' && st.State != 'X' {
		return pid, nil
	}
	tids, err := Threads(pid)
	if err != nil {
		return 0, err
	}
	for _, tid := range tids {
		if tid == pid {
			continue
		}
		if ts, err := ReadStat(pid, tid); err == nil && ts.State != 'Z' && ts.State != 'X' {
			return tid, nil
		}
	}
	return 0, fmt.Errorf("pid %d: %w (its main thread is a zombie and no other thread lives)", pid, ErrGone)
}
