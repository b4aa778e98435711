package safedir

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// File is a new file being written under a temporary name in its
// directory; Commit publishes it, Abort removes it.
type File struct {
	*os.File
	dir  *Dir
	temp string // its name in dir
	done bool
}

// CreateTemp creates a new file in d named by pattern, whose last "*" is
// replaced by a random string (appended when there is none), with mode
// 0600 until Commit.
func (d *Dir) CreateTemp(pattern string) (*File, error) {
	prefix, suffix := pattern, ""
	if i := strings.LastIndexByte(pattern, '*'); i >= 0 {
		prefix, suffix = pattern[:i], pattern[i+1:]
	}
	for range 10000 {
		name := prefix + randomSuffix() + suffix
		if err := validName(name); err != nil {
			return nil, &fs.PathError{Op: "createtemp", Path: d.path(name), Err: err}
		}
		fd, err := openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600, true)
		if err == unix.EEXIST {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "createtemp", Path: d.path(name), Err: err}
		}
		return &File{File: os.NewFile(uintptr(fd), d.path(name)), dir: d, temp: name}, nil
	}
	return nil, &fs.PathError{Op: "createtemp", Path: d.path(pattern), Err: fs.ErrExist}
}

// TempName is the file's temporary name in its directory.
func (f *File) TempName() string { return f.temp }

// Commit sets the file's mode with fchmod, syncs it, closes it and renames
// it over name in its directory: a reader sees the old file or the whole
// new one. The directory itself is not synced (Dir.Sync).
func (f *File) Commit(name string, perm fs.FileMode) (err error) {
	if f.done {
		return errors.New("safedir: Commit after Commit or Abort")
	}
	defer func() {
		if err != nil {
			f.Abort()
		}
	}()
	if err := validName(name); err != nil {
		return &fs.PathError{Op: "commit", Path: f.dir.path(name), Err: err}
	}
	if err := f.File.Chmod(perm.Perm()); err != nil {
		return err
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	if err := f.File.Close(); err != nil {
		return err
	}
	f.done = true
	if err := unix.Renameat(f.dir.fd, f.temp, f.dir.fd, name); err != nil {
		_ = unix.Unlinkat(f.dir.fd, f.temp, 0)
		return &os.LinkError{Op: "rename", Old: f.dir.path(f.temp), New: f.dir.path(name), Err: err}
	}
	return nil
}

// Abort closes the file and removes it; after Commit it does nothing.
func (f *File) Abort() error {
	if f.done {
		return nil
	}
	f.done = true
	f.File.Close()
	if err := unix.Unlinkat(f.dir.fd, f.temp, 0); err != nil && err != unix.ENOENT {
		return &fs.PathError{Op: "remove", Path: f.dir.path(f.temp), Err: err}
	}
	return nil
}

// WriteFile writes name atomically through write (buffered): a new
// temporary file, fchmod to perm, fsync, renamed over name.
func (d *Dir) WriteFile(name string, perm fs.FileMode, write func(io.Writer) error) error {
	if err := validName(name); err != nil {
		return &fs.PathError{Op: "write", Path: d.path(name), Err: err}
	}
	f, err := d.CreateTemp("." + name + ".tmp-*")
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	if err := write(bw); err != nil {
		f.Abort()
		return fmt.Errorf("write %s: %w", d.path(name), err)
	}
	if err := bw.Flush(); err != nil {
		f.Abort()
		return fmt.Errorf("write %s: %w", d.path(name), err)
	}
	return f.Commit(name, perm)
}

// TooLargeError is a file larger than its reader accepts.
type TooLargeError struct {
	Path        string
	Size, Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: %s, more than the %s stallwatch reads", e.Path, byteSize(e.Size), byteSize(e.Limit))
}

func byteSize(n int64) string {
	switch {
	case n >= 10<<30:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 10<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 10<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Open opens the regular file name for reading; anything else (a link, a
// FIFO, a device) is refused with ErrNotRegular, without blocking.
func (d *Dir) Open(name string) (*os.File, error) {
	if err := validName(name); err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path(name), Err: err}
	}
	fd, err := openat(d.fd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0, true)
	if err == unix.ELOOP {
		err = fmt.Errorf("%w (a symbolic link)", ErrNotRegular)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path(name), Err: err}
	}
	return regular(fd, d.path(name))
}

// ReadFile reads the regular file name whole, refusing one larger than
// limit bytes before reading it.
func (d *Dir) ReadFile(name string, limit int64) ([]byte, error) {
	f, err := d.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, limit)
}

// OpenRegular opens path for reading when it is a regular file; a FIFO,
// device, socket or directory is refused with ErrNotRegular, and opening
// never blocks. Symbolic links are followed: the path is the user's.
func OpenRegular(path string) (*os.File, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return regular(fd, path)
}

// regular wraps fd when it is a regular file and closes it otherwise.
func regular(fd int, name string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w (%s)", ErrNotRegular, kindOf(st.Mode))}
	}
	// Reads must block as usual; O_NONBLOCK only kept the open from
	// waiting on a FIFO.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return "not a file"
}

// readLimited reads f whole when its size is at most limit; the size is
// checked first, and again while reading (the file may grow).
func readLimited(f *os.File, limit int64) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, &TooLargeError{Path: f.Name(), Size: st.Size(), Limit: limit}
	}
	data := make([]byte, 0, st.Size()+1)
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := f.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if int64(len(data)) > limit {
			return nil, &TooLargeError{Path: f.Name(), Size: int64(len(data)), Limit: limit}
		}
		if err == io.EOF {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// ReadRegular reads the regular file at path whole (OpenRegular), refusing
// one larger than limit bytes before reading it.
func ReadRegular(path string, limit int64) ([]byte, error) {
	f, err := OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, limit)
}

// randomSuffix makes temporary names unlikely to collide; O_EXCL and
// mkdirat, not the name, make them safe.
func randomSuffix() string { return fmt.Sprintf("%012x", rand.Uint64()&(1<<48-1)) }

// fileInfo is an fs.FileInfo from fstatat.
type fileInfo struct {
	name string
	st   unix.Stat_t
}

func newFileInfo(name string, st *unix.Stat_t) *fileInfo { return &fileInfo{name: name, st: *st} }

func (fi *fileInfo) Name() string { return fi.name }
func (fi *fileInfo) Size() int64  { return fi.st.Size }
func (fi *fileInfo) ModTime() time.Time {
	return time.Unix(fi.st.Mtim.Sec, fi.st.Mtim.Nsec)
}
func (fi *fileInfo) IsDir() bool { return fi.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (fi *fileInfo) Sys() any    { return &fi.st }
func (fi *fileInfo) Mode() fs.FileMode {
	m := fs.FileMode(fi.st.Mode & 0o777)
	switch fi.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if fi.st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// WriteFileAt writes the file at path atomically (Dir.WriteFile) in its
// directory, which must exist and pass Open's check: for an output file
// a user names, such as `stallwatch report -o FILE`.
func WriteFileAt(path string, perm fs.FileMode, write func(io.Writer) error) error {
	dir, base := filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	d, err := Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.WriteFile(base, perm, write); err != nil {
		return err
	}
	return d.Sync()
}
