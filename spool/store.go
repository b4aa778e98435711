package spool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// store is the spool's directory: every file operation the spool makes.
type store struct {
	dir string
	f   *os.File // the directory, held open for flock
}

const (
	entrySuffix = ".json"
	tempPrefix  = ".tmp-"
	maxEntry    = 64 << 10 // an entry is a few hundred bytes
)

func openStore(dir string) (*store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	return &store{dir: dir, f: f}, nil
}

func (s *store) close() error { return s.f.Close() }

// tryLock takes the directory for delivery; false when another process
// holds it.
func (s *store) tryLock() (bool, error) {
	err := unix.Flock(int(s.f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// list returns the entries' names, and removes temporary files a crash
// left behind.
func (s *store) list() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, tempPrefix):
			_ = os.Remove(filepath.Join(s.dir, name))
		case strings.HasSuffix(name, entrySuffix) && e.Type().IsRegular():
			names = append(names, name)
		}
	}
	return names, nil
}

func (s *store) read(name string) ([]byte, error) {
	f, err := os.OpenFile(filepath.Join(s.dir, name), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxEntry+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxEntry {
		return nil, fmt.Errorf("larger than %d bytes", maxEntry)
	}
	return data, nil
}

// write creates name with data, atomically and durably.
func (s *store) write(name string, data []byte) error {
	f, err := os.CreateTemp(s.dir, tempPrefix)
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return s.f.Sync()
}

func (s *store) remove(name string) error {
	err := os.Remove(filepath.Join(s.dir, name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return s.f.Sync()
}
