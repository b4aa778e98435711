package watchdog

import (
	"context"
	"errors"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// File is a heartbeat file: a beat is any change of its modification time,
// size, content or identity (a new file renamed over it). The directory is
// watched with inotify, so a beat is seen at once, and the file is also
// polled every Poll, because inotify is silent on NFS and unreliable on
// overlayfs. The file not existing is not a beat; its coming back is.
type File struct {
	Path string
	Poll time.Duration // default 1s
}

func (f *File) String() string { return "file " + f.Path }

// Run implements Source.
func (f *File) Run(ctx context.Context, beat func()) error {
	path, err := filepath.Abs(f.Path)
	if err != nil {
		return err
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if w := watchDir(filepath.Dir(path)); w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	ticker := time.NewTicker(orDefault(f.Poll, time.Second))
	defer ticker.Stop()
	last := fingerprintOf(path)
	check := func() {
		fp := fingerprintOf(path)
		if fp != last && fp.exists {
			beat()
		}
		last = fp
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-events:
			if !ok {
				events = nil // inotify gone: the poll goes on alone
			} else if ev.Name == path {
				check()
			}
		case _, ok := <-errs:
			if !ok {
				errs = nil
			} else {
				check() // an overflow may have hidden our event
			}
		case <-ticker.C:
			check()
		}
	}
}

// watchDir returns an inotify watcher of dir, or nil when inotify cannot
// watch it (no such directory yet, no inotify instances left): the poll
// then carries the source alone.
func watchDir(dir string) *fsnotify.Watcher {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil
	}
	return w
}

// fingerprint is what identifies one state of the heartbeat file.
type fingerprint struct {
	exists     bool
	dev, ino   uint64
	size       int64
	mtime      int64
	contentSum uint64 // of files up to smallFile bytes
}

// smallFile bounds the content read on every check: a heartbeat file holds
// a timestamp or a counter; a big file's size and mtime say enough.
const smallFile = 4096

func fingerprintOf(path string) fingerprint {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return fingerprint{}
	}
	fp := fingerprint{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		fp.dev, fp.ino = st.Dev, st.Ino
	}
	if fp.size <= smallFile {
		fp.contentSum = contentSum(path)
	}
	return fp
}

func contentSum(path string) uint64 {
	// O_NONBLOCK: the path may have been swapped for a FIFO since the
	// stat, and opening a FIFO blocks.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0
	}
	defer f.Close()
	h := fnv.New64a()
	if _, err := io.Copy(h, io.LimitReader(f, smallFile)); err != nil && !errors.Is(err, syscall.EAGAIN) {
		return 0
	}
	return h.Sum64()
}
