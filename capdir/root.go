package capdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/model"
)

// File is one file of a capture directory and how to render it.
type File struct {
	Name  string
	Write func(io.Writer) error
}

// Root is the directory capture directories are written under (--out),
// held open: every write, update and prune is relative to it.
type Root struct {
	d *safedir.Dir
}

// OpenRoot opens (creating it when missing) the directory captures go
// under, and checks at once that it is safe and writable, so that a bad
// --out is found at start-up and not at the first stall. A directory that
// another user can write is refused (*safedir.UnsafeError).
func OpenRoot(path string) (*Root, error) {
	d, err := safedir.MkdirAll(path, 0o755)
	if err != nil {
		return nil, fmt.Errorf("capture directory: %w", err)
	}
	if err := unix.Faccessat(d.Fd(), ".", unix.W_OK, unix.AT_EACCESS); err != nil {
		d.Close()
		return nil, fmt.Errorf("capture directory %s is not writable: %w", path, err)
	}
	return &Root{d: d}, nil
}

// Path is the root as it was named.
func (r *Root) Path() string { return r.d.Name() }

// Close releases the directory.
func (r *Root) Close() error { return r.d.Close() }

// tempPrefix marks directories being written; Prune removes stale ones.
const tempPrefix = ".stallwatch-tmp-"

// Write writes a new capture directory <UTC time>-<pid>-<trigger> under
// r with files and capture.json (written last, from info as it is then)
// and returns its path. The directory appears complete or not at all: it
// is written as a hidden directory, each file synced, and renamed into
// place. The files render at once, on goroutines of their own: their
// Write functions must not share state they change. info.Files is set before any file is rendered, so renderings
// that list the files see them. A file that fails to render is left out
// and said in info.Notes: the rest of the capture is still written.
func (r *Root) Write(info *model.Info, files []File) (dir string, err error) {
	if info == nil {
		return "", errors.New("capdir: Write: nil info")
	}
	info.Schema = model.Schema
	info.Files = nil
	for _, f := range files {
		if f.Name != FileInfo {
			info.Files = append(info.Files, f.Name)
		}
	}
	info.Files = append(info.Files, FileInfo)

	tmpName, tmp, err := r.d.MkdirTemp(tempPrefix, 0o755)
	if err != nil {
		return "", fmt.Errorf("capture directory: %w", err)
	}
	defer tmp.Close()
	defer func() {
		if err != nil {
			_ = r.d.RemoveAll(tmpName)
		}
	}()
	for i, werr := range writeAll(tmp, files) {
		if werr != nil {
			name := files[i].Name
			info.Files = slices.DeleteFunc(info.Files, func(n string) bool { return n == name })
			info.Notes = append(info.Notes, fmt.Sprintf("%s is missing: %v", name, werr))
		}
	}
	if err := tmp.WriteFile(FileInfo, 0o644, func(w io.Writer) error { return writeInfo(w, info) }); err != nil {
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		return "", err
	}
	name, err := r.publish(tmpName, info)
	if err != nil {
		return "", err
	}
	dir = filepath.Join(r.Path(), name)
	if err := r.d.Sync(); err != nil {
		return dir, err
	}
	return dir, nil
}

// writeAll renders, writes and syncs the files (but capture.json) into
// dir at once, each on a goroutine of its own: the renderings share the
// CPUs, and each file's sync waits for the disk beside the others' instead
// of after them (a capture's end waited for six syncs in a row). The
// errors are by file.
func writeAll(dir *safedir.Dir, files []File) []error {
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i, f := range files {
		if f.Name == FileInfo {
			continue
		}
		wg.Go(func() { errs[i] = dir.WriteFile(f.Name, 0o644, f.Write) })
	}
	wg.Wait()
	return errs
}

// publish renames the finished temporary directory to its capture name,
// adding -2, -3 … when another capture has the same name.
func (r *Root) publish(tmpName string, info *model.Info) (string, error) {
	for seq := 1; seq < 1000; seq++ {
		name := DirName(info, seq)
		err := r.d.Rename(tmpName, r.d, name, safedir.NoReplace)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("publish capture: %w", err)
		}
		return name, nil
	}
	return "", fmt.Errorf("publish capture: %s and 998 more names are taken", DirName(info, 1))
}

func writeInfo(w io.Writer, info *model.Info) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(info)
}

// DirName is the name of a capture's directory:
// "20260105T143012.345Z-4242-stall" (seq > 1 appends "-seq" to keep two
// captures of the same millisecond apart). Names sort by time.
func DirName(info *model.Info, seq int) string {
	t := info.TriggerAt
	if t.IsZero() {
		t = info.Start
	}
	if t.IsZero() {
		t = time.Now()
	}
	name := fmt.Sprintf("%s-%d-%s", t.UTC().Format(dirTimeLayout), info.PID, safeTrigger(string(info.Trigger)))
	if seq > 1 {
		name += "-" + strconv.Itoa(seq)
	}
	return name
}

const dirTimeLayout = "20060102T150405.000Z"

var dirNameRx = regexp.MustCompile(`^\d{8}T\d{6}\.\d{3}Z-\d+-[a-z0-9]+(-\d+)?$`)

// IsDirName says whether name is a capture directory's name.
func IsDirName(name string) bool { return dirNameRx.MatchString(name) }

func safeTrigger(s string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			sb.WriteRune(r)
		}
	}
	if sb.Len() == 0 {
		return string(model.Manual)
	}
	s = sb.String()
	if len(s) > 20 {
		s = s[:20]
	}
	return s
}

// OpenDir opens the capture directory name under r for reading and
// updating; it must be one of r's captures (by its name).
func (r *Root) OpenDir(name string) (*Dir, error) {
	if !IsDirName(name) {
		return nil, fmt.Errorf("%s: not a capture directory's name", filepath.Join(r.Path(), name))
	}
	d, err := r.d.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return readDir(d, filepath.Join(r.Path(), name))
}

// Update changes the capture.json of r's capture name with f (for example
// to record that the stall recovered), then renders again the files
// render returns (the reports, which show capture.json's facts), each
// replaced atomically, capture.json last. render may be nil. One writer
// per capture directory at a time.
func (r *Root) Update(name string, f func(*model.Info), render func(*Dir) ([]File, error)) error {
	c, err := r.OpenDir(name)
	if err != nil {
		return err
	}
	defer c.Close()
	f(&c.Info)
	c.Info.Schema = model.Schema
	var files []File
	if render != nil {
		if files, err = render(c); err != nil {
			return fmt.Errorf("%s: %w", c.Path, err)
		}
	}
	var errs []error
	for _, file := range files {
		if file.Name == FileInfo {
			continue
		}
		if err := c.d.WriteFile(file.Name, 0o644, file.Write); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.d.WriteFile(FileInfo, 0o644, func(w io.Writer) error { return writeInfo(w, &c.Info) }); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// staleTemp is how old a half-written capture directory must be before
// Prune takes it for the leftover of a crash.
const staleTemp = time.Hour

// Prune keeps the keep newest capture directories in r and removes the
// older ones (keep <= 0 keeps all), and returns the names it removed and
// those it spared: spare, when not nil, names captures to keep whatever
// their age (those whose upload is still queued). Only
// directories named like captures are touched, plus half-written ones a
// crash left behind over an hour ago. Nothing is followed: a link planted
// in place of a capture is removed, not its target.
func (r *Root) Prune(keep int, spare func(name string) bool) (removed, spared []string, err error) {
	names, err := r.d.ReadDir()
	if err != nil {
		return nil, nil, fmt.Errorf("prune: %w", err)
	}
	var captures []string
	var errs []error
	for _, name := range names {
		fi, err := r.d.Lstat(name)
		if err != nil || !fi.IsDir() {
			continue
		}
		switch {
		case IsDirName(name):
			captures = append(captures, name)
		case strings.HasPrefix(name, tempPrefix) && time.Since(fi.ModTime()) > staleTemp:
			if err := r.d.RemoveAll(name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if keep > 0 && len(captures) > keep {
		slices.Sort(captures) // names begin with the UTC time
		for _, name := range captures[:len(captures)-keep] {
			if spare != nil && spare(name) {
				spared = append(spared, name)
				continue
			}
			if err := r.d.RemoveAll(name); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, name)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return removed, spared, fmt.Errorf("prune: %w", err)
	}
	return removed, spared, nil
}
