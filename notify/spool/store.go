package spool

import (
	"errors"
	"io/fs"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/safedir"
)

// store is the spool's directory: every file operation the spool makes,
// relative to a directory descriptor (internal/safedir), since stallwatch
// writes it as root.
//
// Operations share the descriptor and close takes it alone: a Close that
// ran while Run scanned, or an Add wrote, would otherwise let a number the
// kernel has already handed to another open be used as this directory.
type store struct {
	mu     sync.RWMutex
	d      *safedir.Dir
	closed bool
}

const (
	entrySuffix = ".json"
	tempPrefix  = ".tmp-"
	maxEntry    = 64 << 10 // an entry is a few hundred bytes
	// staleTemp is how old a temporary file must be before a scan takes it
	// for the leftover of a crash: another process may be writing it.
	staleTemp = time.Minute
)

// openStore opens the spool directory, creating it (and its parents),
// and refuses one another user can write.
func openStore(dir string) (*store, error) {
	d, err := safedir.MkdirAll(dir, 0o700)
	if err != nil {
		return nil, err
	}
	return &store{d: d}, nil
}

func (s *store) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.d.Close()
}

// use holds the descriptor open for one operation; release with done.
func (s *store) use() (done func(), err error) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		return nil, ErrClosed
	}
	return s.mu.RUnlock, nil
}

// tryLock takes the directory for delivery; false when another process
// holds it. The lock goes with the descriptor.
func (s *store) tryLock() (bool, error) {
	done, err := s.use()
	if err != nil {
		return false, err
	}
	defer done()
	err = unix.Flock(s.d.Fd(), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// list returns the entries' names, and removes temporary files a crash
// left behind.
func (s *store) list() ([]string, error) {
	done, err := s.use()
	if err != nil {
		return nil, err
	}
	defer done()
	names, err := s.d.ReadDir()
	if err != nil {
		return nil, err
	}
	var entries []string
	for _, name := range names {
		fi, err := s.d.Lstat(name)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		switch {
		case strings.HasPrefix(name, tempPrefix):
			if time.Since(fi.ModTime()) > staleTemp {
				_ = s.d.Remove(name)
			}
		case strings.HasSuffix(name, entrySuffix):
			entries = append(entries, name)
		}
	}
	return entries, nil
}

func (s *store) read(name string) ([]byte, error) {
	done, err := s.use()
	if err != nil {
		return nil, err
	}
	defer done()
	return s.d.ReadFile(name, maxEntry)
}

// write creates name with data: a temporary file, synced and renamed
// into place, then the directory synced.
func (s *store) write(name string, data []byte) error {
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	f, err := s.d.CreateTemp(tempPrefix + "*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return err
	}
	if err := f.Commit(name, 0o600); err != nil {
		return err
	}
	return s.d.Sync()
}

func (s *store) remove(name string) error {
	done, err := s.use()
	if err != nil {
		return err
	}
	defer done()
	if err := s.d.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return s.d.Sync()
}
