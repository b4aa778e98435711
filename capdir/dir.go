package capdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/model"
)

// Dir is one capture directory opened for reading: its capture.json read,
// its other files opened by name relative to the directory.
type Dir struct {
	Path string
	Info model.Info
	d    *safedir.Dir
}

// MaxInfo bounds capture.json: it holds facts, not data.
const MaxInfo = 16 << 20

// ErrNoInfo is returned by Open for a directory without capture.json.
var ErrNoInfo = errors.New("no " + FileInfo + ": not a capture directory")

// Open opens the capture directory at path and reads its capture.json.
// Reading needs no trust in the directory: nothing is written through it.
func Open(path string) (*Dir, error) {
	d, err := safedir.OpenForRead(path)
	if err != nil {
		return nil, err
	}
	return readDir(d, path)
}

func readDir(d *safedir.Dir, path string) (*Dir, error) {
	c := &Dir{Path: path, d: d}
	data, err := d.ReadFile(FileInfo, MaxInfo)
	if errors.Is(err, fs.ErrNotExist) {
		d.Close()
		return nil, fmt.Errorf("%s: %w", path, ErrNoInfo)
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	if err := decodeInfo(data, &c.Info); err != nil {
		d.Close()
		return nil, fmt.Errorf("%s: %w", filepath.Join(path, FileInfo), err)
	}
	return c, nil
}

// decodeInfo parses capture.json, refusing a schema newer than this one.
func decodeInfo(data []byte, info *model.Info) error {
	if err := json.Unmarshal(data, info); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("offset %d: %v", se.Offset, err)
		}
		return err
	}
	if info.Schema > model.Schema {
		return fmt.Errorf("capture.json schema %d is newer than this stallwatch reads (%d)", info.Schema, model.Schema)
	}
	return nil
}

// Has reports whether the capture holds the regular file name.
func (c *Dir) Has(name string) bool {
	fi, err := c.d.Lstat(name)
	return err == nil && fi.Mode().IsRegular()
}

// Open opens the capture's file name for reading: a regular file only
// (never a link, never a FIFO).
func (c *Dir) Open(name string) (*os.File, error) { return c.d.Open(name) }

// ReadFile reads the capture's file name, refusing one larger than limit
// before reading it.
func (c *Dir) ReadFile(name string, limit int64) ([]byte, error) { return c.d.ReadFile(name, limit) }

// Close releases the directory.
func (c *Dir) Close() error { return c.d.Close() }
