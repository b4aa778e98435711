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
// polled, because inotify is silent on NFS and unreliable on overlayfs: every
// Poll until inotify has announced a change of the file, every SlowPoll
// after that (each wake-up costs more CPU than the check itself). A change
// that only the poll saw means inotify failed (the directory was replaced,
// say): the watch is set up again and the fast poll resumes. The file not
// existing is not a beat; its coming back is.
type File struct {
	Path     string
	Poll     time.Duration // default 1s
	SlowPoll time.Duration // default 5×Poll

	// started, when set (by tests), is called once Run has read the
	// file's first state; inotify says whether its directory is watched.
	started func(inotify bool)
}

func (f *File) String() string { return "file " + f.Path }

// Run implements Source.
func (f *File) Run(ctx context.Context, beat func()) error {
	path, err := filepath.Abs(f.Path)
	if err != nil {
		return err
	}
	fw := &fileWatch{path: path, fast: orDefault(f.Poll, time.Second)}
	fw.slow = orDefault(f.SlowPoll, 5*fw.fast)
	defer fw.unwatch()
	fw.rewatch()
	fw.last = fingerprintOf(path, fingerprint{})
	if f.started != nil {
		f.started(fw.w != nil)
	}
	armed := fw.fast
	timer := time.NewTimer(armed)
	defer timer.Stop()
	for {
		// Losing the watch brings the fast poll back at once.
		if want := fw.interval(); want < armed {
			armed = want
			timer.Reset(armed)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-fw.events():
			switch {
			case !ok:
				fw.unwatch() // inotify gone: the poll goes on alone
			case ev.Name == path:
				if fw.check(beat) {
					fw.trusted = true
				}
			case ev.Name == fw.dir && ev.Has(fsnotify.Remove|fsnotify.Rename):
				fw.rewatch() // the directory itself went away
			}
		case _, ok := <-fw.errors():
			if !ok {
				fw.unwatch()
			} else {
				fw.check(beat) // an overflow may have hidden our event
			}
		case <-timer.C:
			if fw.check(beat) && fw.trusted || fw.w == nil {
				fw.rewatch() // inotify missed a change, or never worked
			}
			armed = fw.interval()
			timer.Reset(armed)
		}
	}
}

// fileWatch is the state of one File.Run.
type fileWatch struct {
	path, dir  string
	fast, slow time.Duration
	w          *fsnotify.Watcher // nil when inotify cannot watch the directory
	trusted    bool              // inotify announced a change of the file
	last       fingerprint
}

func (fw *fileWatch) interval() time.Duration {
	if fw.trusted && fw.w != nil {
		return fw.slow
	}
	return fw.fast
}

// check compares the file with what it was and beats on a change.
func (fw *fileWatch) check(beat func()) (changed bool) {
	fp := fingerprintOf(fw.path, fw.last)
	changed = fp.exists && !fp.sameAs(fw.last)
	if changed {
		beat()
	}
	fw.last = fp
	return changed
}

func (fw *fileWatch) rewatch() {
	fw.unwatch()
	fw.dir = filepath.Dir(fw.path)
	fw.w = watchDir(fw.dir)
	fw.trusted = false
}

func (fw *fileWatch) unwatch() {
	if fw.w != nil {
		fw.w.Close()
		fw.w = nil
	}
	fw.trusted = false
}

// events and errors are nil channels (never ready) without a watcher.
func (fw *fileWatch) events() <-chan fsnotify.Event {
	if fw.w == nil {
		return nil
	}
	return fw.w.Events
}

func (fw *fileWatch) errors() <-chan error {
	if fw.w == nil {
		return nil
	}
	return fw.w.Errors
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
	exists   bool
	dev, ino uint64
	size     int64
	mtime    int64
	// sum of the content of a file up to smallFile bytes; only read when
	// nothing else changed (hasSum says whether it was).
	sum    uint64
	hasSum bool
}

// sameAs reports whether a and b are one state of the file; content sums
// count only when both were read.
func (a fingerprint) sameAs(b fingerprint) bool {
	if a.exists != b.exists || a.dev != b.dev || a.ino != b.ino || a.size != b.size || a.mtime != b.mtime {
		return false
	}
	return !a.hasSum || !b.hasSum || a.sum == b.sum
}

// smallFile bounds the content read on a check: a heartbeat file holds a
// timestamp or a counter; a big file's size and mtime say enough.
const smallFile = 4096

// fingerprintOf reads the file's state. The content is read only when the
// file looks as it did in prev: it tells a change on a file system with
// coarse timestamps, and costs syscalls a beat never needs otherwise.
func fingerprintOf(path string, prev fingerprint) fingerprint {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() {
		return fingerprint{}
	}
	fp := fingerprint{exists: true, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		fp.dev, fp.ino = st.Dev, st.Ino
	}
	if fp.size <= smallFile && fp.sameAs(fingerprint{exists: prev.exists, dev: prev.dev, ino: prev.ino, size: prev.size, mtime: prev.mtime}) {
		fp.sum, fp.hasSum = contentSum(path)
	}
	return fp
}

func contentSum(path string) (uint64, bool) {
	// O_NONBLOCK: the path may have been swapped for a FIFO since the
	// stat, and opening a FIFO blocks.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	h := fnv.New64a()
	if _, err := io.Copy(h, io.LimitReader(f, smallFile)); err != nil && !errors.Is(err, syscall.EAGAIN) {
		return 0, false
	}
	return h.Sum64(), true
}
