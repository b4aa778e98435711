package daemon

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/safedir"
)

// quota keeps the captures under out within a number of bytes: after each
// capture the oldest are removed until the rest fit, and while even the
// newest alone does not fit, captures are refused. Captures whose upload
// is pending go last: the quota is a bound, but a capture not yet
// delivered is worth more than one that was.
type quota struct {
	log     *slog.Logger
	dir     *safedir.Dir
	pending func(abs string) bool // nil: no uploads

	mu    sync.Mutex
	limit int64
	used  int64
	count int
}

func openQuota(out string, limit int64, pending func(abs string) bool, log *slog.Logger) (*quota, error) {
	d, err := safedir.MkdirAll(out, 0o755)
	if err != nil {
		return nil, fmt.Errorf("out %s: %w", out, err)
	}
	q := &quota{log: log, dir: d, limit: limit, pending: pending}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.enforce("")
	return q, nil
}

func (q *quota) close() { q.dir.Close() }

func (q *quota) setLimit(limit int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.limit = limit
	q.enforce("")
}

// check refuses a capture while the captures kept fill the quota.
func (q *quota) check() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.limit > 0 && q.used >= q.limit {
		return &LimitError{What: "disk-quota", Msg: fmt.Sprintf("the captures under %s use %s of %s; raise disk-quota or move captures away",
			q.dir.Name(), byteSize(q.used), byteSize(q.limit))}
	}
	return nil
}

// written accounts for a capture just written, removing the oldest ones
// if the quota is exceeded.
func (q *quota) written(dir string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.enforce(dir)
}

// usage returns the bytes and the number of captures under out.
func (q *quota) usage() (used, limit int64, count int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.used, q.limit, q.count
}

type captureDir struct {
	name  string
	bytes int64
}

// enforce counts the captures and removes the oldest while they exceed
// the quota: first those with no upload pending, then the others; never
// the newest (the one just written, or the newest name).
func (q *quota) enforce(newest string) {
	dirs := q.list()
	q.used, q.count = 0, len(dirs)
	for _, c := range dirs {
		q.used += c.bytes
	}
	if q.limit <= 0 || q.used <= q.limit || len(dirs) < 2 {
		return
	}
	keep := dirs[len(dirs)-1].name
	if newest != "" {
		keep = filepath.Base(newest)
	}
	var delivered, undelivered []captureDir
	for _, c := range dirs {
		switch {
		case c.name == keep:
		case q.pending != nil && q.isPending(c.name):
			undelivered = append(undelivered, c)
		default:
			delivered = append(delivered, c)
		}
	}
	for _, c := range append(delivered, undelivered...) {
		if q.used <= q.limit {
			return
		}
		if err := q.dir.RemoveAll(c.name); err != nil {
			q.log.Error("removing a capture for the disk quota", "dir", c.name, "err", err)
			return
		}
		q.used -= c.bytes
		q.count--
		if slices.Contains(undelivered, c) {
			q.log.Warn("removed a capture for the disk quota before its upload; the upload is dropped", "dir", q.dir.Name()+"/"+c.name, "bytes", c.bytes, "disk_quota", q.limit)
			continue
		}
		q.log.Info("removed the oldest capture for the disk quota", "dir", q.dir.Name()+"/"+c.name, "bytes", c.bytes, "disk_quota", q.limit)
	}
}

// isPending says whether the capture's upload is queued (the queue knows
// it by its absolute path).
func (q *quota) isPending(name string) bool {
	abs, err := filepath.Abs(filepath.Join(q.dir.Name(), name))
	return err != nil || q.pending(abs)
}

// list returns the capture directories, oldest first (their names begin
// with the UTC time), with the bytes of their files.
func (q *quota) list() []captureDir {
	names, err := q.dir.ReadDir()
	if err != nil {
		q.log.Error("listing captures", "dir", q.dir.Name(), "err", err)
		return nil
	}
	var dirs []captureDir
	for _, n := range names {
		if !capdir.IsDirName(n) {
			continue
		}
		sub, err := q.dir.OpenDir(n)
		if err != nil {
			continue
		}
		c := captureDir{name: n}
		files, _ := sub.ReadDir()
		for _, f := range files {
			if fi, err := sub.Lstat(f); err == nil && fi.Mode().IsRegular() {
				c.bytes += fi.Size()
			}
		}
		sub.Close()
		dirs = append(dirs, c)
	}
	slices.SortFunc(dirs, func(a, b captureDir) int {
		switch {
		case a.name < b.name:
			return -1
		case a.name > b.name:
			return 1
		}
		return 0
	})
	return dirs
}

// byteSize is n in the largest binary unit that keeps it above 1.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
