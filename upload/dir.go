package upload

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// capDir is a capture directory opened for reading. Files are opened
// relative to it and never through a symbolic link: stallwatch runs as
// root, and what it reads goes to Datadog.
type capDir struct{ fd int }

func openDir(dir string) (*capDir, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return &capDir{fd: fd}, nil
}

func (d *capDir) Close() error { return unix.Close(d.fd) }

// read reads a regular file of the directory, at most limit bytes.
func (d *capDir) read(name string, limit int64) ([]byte, error) {
	fd, err := unix.Openat(d.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%v)", name, st.Mode().Type())
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d an upload takes", name, st.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: grew past %d bytes while read", name, limit)
	}
	return data, nil
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
