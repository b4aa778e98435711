package continuous

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/report"
)

// DirName is the directory of the periods' files under the output
// directory.
const DirName = "profiles"

// fileSuffix ends every period's file name; the name before it is the
// period's start (fileTime).
const fileSuffix = ".pb.gz"

// fileTime is the layout of a period file's name: its start, UTC.
const fileTime = "20060102T150405.000000Z"

// FileName is the name of the file of the period that starts at start.
func FileName(start time.Time) string { return start.UTC().Format(fileTime) + fileSuffix }

// parseFileName reads a period's start from its file's name.
func parseFileName(name string) (time.Time, bool) {
	base, ok := strings.CutSuffix(name, fileSuffix)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(fileTime, base)
	return t, err == nil
}

// TargetDir is the directory of one target's periods: its pid and its
// process name, kept to the characters a file name may safely hold.
func TargetDir(pid int, process string) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, process)
	if len(clean) > 64 {
		clean = clean[:64]
	}
	clean = strings.TrimLeft(clean, ".")
	if clean == "" {
		return strconv.Itoa(pid)
	}
	return strconv.Itoa(pid) + "-" + clean
}

// parseTargetDir reads the pid from a target directory's name.
func parseTargetDir(name string) (int, bool) {
	digits, _, _ := strings.Cut(name, "-")
	pid, err := strconv.Atoi(digits)
	return pid, err == nil && pid > 0
}

// store keeps the periods' files: it writes them and removes the oldest
// past its bounds, sparing those whose upload is queued.
type store struct {
	root     *safedir.Dir
	keep     time.Duration
	maxBytes int64
	pending  func(abs string) bool // nil: nothing is queued
	log      *slog.Logger

	mu      sync.Mutex
	files   []storedFile // oldest start first
	bytes   int64
	subdirs map[string]*safedir.Dir
	active  map[string]int // target directories of targets profiled now
	spared  map[string]bool
}

type storedFile struct {
	dir, name string
	start     time.Time
	size      int64
}

// openStore opens (creating it) the directory of the periods and reads
// what earlier runs left in it.
func openStore(path string, keep time.Duration, maxBytes int64, pending func(string) bool, log *slog.Logger) (*store, error) {
	root, err := safedir.MkdirAll(path, 0o755)
	if err != nil {
		return nil, err
	}
	s := &store{root: root, keep: keep, maxBytes: maxBytes, pending: pending, log: log,
		subdirs: map[string]*safedir.Dir{}, active: map[string]int{}, spared: map[string]bool{}}
	if err := s.scan(); err != nil {
		root.Close()
		return nil, err
	}
	return s, nil
}

// scan reads the files earlier runs left.
func (s *store) scan() error {
	names, err := s.root.ReadDir()
	if err != nil {
		return err
	}
	for _, dir := range names {
		if _, ok := parseTargetDir(dir); !ok {
			continue
		}
		if fi, err := s.root.Lstat(dir); err != nil || !fi.IsDir() {
			continue
		}
		d, err := s.root.OpenDir(dir)
		if err != nil {
			s.log.Warn("a directory of continuous profiles cannot be used; its files are not pruned", "dir", filepath.Join(s.root.Name(), dir), "err", err)
			continue
		}
		files, err := d.ReadDir()
		for _, name := range files {
			start, ok := parseFileName(name)
			if !ok {
				continue
			}
			if fi, err := d.Lstat(name); err == nil && fi.Mode().IsRegular() {
				s.files = append(s.files, storedFile{dir: dir, name: name, start: start, size: fi.Size()})
				s.bytes += fi.Size()
			}
		}
		d.Close()
		if err != nil {
			return err
		}
	}
	sortFiles(s.files)
	return nil
}

func sortFiles(fs []storedFile) {
	slices.SortFunc(fs, func(a, b storedFile) int { return a.start.Compare(b.start) })
}

// path is a stored file's path.
func (s *store) path(dir, name string) string { return filepath.Join(s.root.Name(), dir, name) }

// use marks a target directory as in use (n = 1) or no longer (n = -1):
// an empty directory in use is not removed.
func (s *store) use(dir string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active[dir] += n; s.active[dir] <= 0 {
		delete(s.active, dir)
		s.releaseLocked(dir)
	}
}

// write writes the profile of the period that starts at start under dir,
// and prunes. It returns the file's path.
func (s *store) write(dir string, start time.Time, p *profile.Profile) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, err := s.subdir(dir)
	if err != nil {
		return "", err
	}
	defer s.releaseLocked(dir)
	name := FileName(start)
	if err := d.WriteFile(name, 0o644, func(w io.Writer) error { return report.WriteProfile(w, p) }); err != nil {
		return "", err
	}
	fi, err := d.Lstat(name)
	if err != nil {
		return "", err
	}
	s.files = append(s.files, storedFile{dir: dir, name: name, start: start, size: fi.Size()})
	if n := len(s.files); n > 1 && s.files[n-2].start.After(start) {
		sortFiles(s.files)
	}
	s.bytes += fi.Size()
	s.pruneLocked(time.Now())
	return s.path(dir, name), nil
}

func (s *store) subdir(dir string) (*safedir.Dir, error) {
	if d := s.subdirs[dir]; d != nil {
		return d, nil
	}
	d, err := s.root.Mkdir(dir, 0o755)
	if err != nil {
		return nil, err
	}
	s.subdirs[dir] = d
	return d, nil
}

// release closes a target directory no target uses now.
func (s *store) releaseLocked(dir string) {
	if d := s.subdirs[dir]; d != nil && s.active[dir] <= 0 {
		d.Close()
		delete(s.subdirs, dir)
	}
}

// pruneLocked removes the files older than keep, then the oldest while
// the files pass maxBytes; a file whose upload is queued stays.
func (s *store) pruneLocked(now time.Time) {
	kept := s.files[:0]
	var removed []string
	emptied := map[string]bool{}
	over := s.bytes - s.maxBytes
	for _, f := range s.files {
		old := s.keep > 0 && now.Sub(f.start) > s.keep
		if !old && (s.maxBytes <= 0 || over <= 0) {
			kept = append(kept, f)
			continue
		}
		p := s.path(f.dir, f.name)
		if s.pending != nil && s.pending(p) {
			if !s.spared[p] {
				s.spared[p] = true
				s.log.Info("a continuous profile past --profile-keep or --profile-max-bytes is kept: its upload is queued", "file", p)
			}
			kept = append(kept, f)
			continue
		}
		if err := s.removeFile(f); err != nil {
			s.log.Warn("removing an old continuous profile", "file", p, "err", err)
			kept = append(kept, f)
			continue
		}
		delete(s.spared, p)
		s.bytes -= f.size
		over -= f.size
		removed = append(removed, p)
		emptied[f.dir] = true
	}
	s.files = kept
	for _, f := range s.files {
		delete(emptied, f.dir)
	}
	for dir := range emptied {
		if s.active[dir] == 0 {
			if err := s.root.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.log.Debug("removing an empty directory of continuous profiles", "dir", dir, "err", err)
			}
		}
	}
	if len(removed) > 0 {
		s.log.Debug("old continuous profiles removed", "removed", len(removed), "kept", len(s.files), "bytes", s.bytes)
	}
}

func (s *store) removeFile(f storedFile) error {
	if d := s.subdirs[f.dir]; d != nil {
		return d.Remove(f.name)
	}
	d, err := s.root.OpenDir(f.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Remove(f.name)
}

// stats says what the store holds.
func (s *store) stats() (files int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.files), s.bytes
}

func (s *store) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for dir, d := range s.subdirs {
		if d != nil {
			d.Close()
		}
		delete(s.subdirs, dir)
	}
	s.root.Close()
}

// errNoFiles is Range's error when nothing overlaps the range.
var errNoFiles = errors.New("no continuous profile in the range")

// fileIn is a period file Range found.
type fileIn struct {
	path  string
	pid   int
	start time.Time
}

// findFiles lists the period files under dir — a target's directory, or
// the directory of all targets — whose start is before to and not more
// than MaxPeriod before from (their end is read from the files).
func findFiles(dir string, from, to time.Time) ([]fileIn, error) {
	d, err := safedir.OpenForRead(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.ReadDir()
	if err != nil {
		return nil, err
	}
	var out []fileIn
	pid, _ := parseTargetDir(filepath.Base(dir))
	for _, name := range names {
		if start, ok := parseFileName(name); ok {
			if start.Before(to) && !start.Before(from.Add(-MaxPeriod)) {
				out = append(out, fileIn{path: filepath.Join(dir, name), pid: pid, start: start})
			}
			continue
		}
		if _, ok := parseTargetDir(name); !ok {
			continue
		}
		if fi, err := d.Lstat(name); err != nil || !fi.IsDir() {
			continue
		}
		sub, err := findFiles(filepath.Join(dir, name), from, to)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, sub...)
	}
	slices.SortFunc(out, func(a, b fileIn) int { return a.start.Compare(b.start) })
	return out, nil
}
