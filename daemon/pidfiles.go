package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// pidfileWatch tells the daemon the moment a rule's pid file names a
// process. A service writes its pid file after it has started (after the
// exec event the connector saw, when its rule could not match yet), and
// the backstop scan comes only every ten scan intervals: without this, a
// pidfile: target waited up to 20 s. It watches the directories that hold
// the files (inotify), not the files: a pid file is often created, or
// replaced by a rename, after the daemon starts.
type pidfileWatch struct {
	w      *fsnotify.Watcher
	files  map[string]bool // the pid files, cleaned
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// watchPIDFiles starts watching the pid files of rules; found is called
// (from another goroutine) with the pid a pid file holds after each
// change. It returns nil when no rule has a pid file. A directory that
// cannot be watched (it does not exist yet) is logged; its pid file is
// read at every scan, as without this watch.
func watchPIDFiles(rules []Rule, log *slog.Logger, found func(pid int)) *pidfileWatch {
	files := map[string]bool{}
	for i := range rules {
		if p := rules[i].Select.PIDFile; p != "" {
			files[filepath.Clean(p)] = true
		}
	}
	if len(files) == 0 {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("pid files are read at each scan only: no inotify", "err", err)
		return nil
	}
	dirs := map[string]bool{}
	for f := range files {
		dir := filepath.Dir(f)
		if dirs[dir] {
			continue
		}
		dirs[dir] = true
		if err := w.Add(dir); err != nil {
			log.Warn("a pid file's directory cannot be watched; the pid file is read at each scan", "dir", dir, "err", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &pidfileWatch{w: w, files: files, cancel: cancel}
	p.done.Add(1)
	go p.run(ctx, log, found)
	return p
}

func (p *pidfileWatch) run(ctx context.Context, log *slog.Logger, found func(pid int)) {
	defer p.done.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-p.w.Events:
			if !ok {
				return
			}
			// Create and Write: written in place; a rename into
			// place is a Create of the new name. Chmod: touch.
			if !p.files[filepath.Clean(ev.Name)] || !ev.Has(fsnotify.Create|fsnotify.Write|fsnotify.Chmod) {
				continue
			}
			if pid := readPIDFile(ev.Name); pid > 0 && pid != os.Getpid() {
				found(pid)
			}
		case err, ok := <-p.w.Errors:
			if !ok {
				return
			}
			log.Warn("watching pid files; the scans still read them", "err", err)
		}
	}
}

// close stops the watch and waits for its goroutine; nil is fine.
func (p *pidfileWatch) close() {
	if p == nil {
		return
	}
	p.cancel()
	_ = p.w.Close()
	p.done.Wait()
}
