package jit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/safedir"
)

// TestMapFileReplacesPlantedLink: a link planted where the map goes is
// replaced by the map, never followed; a directory other users can write
// is refused for -o.
func TestMapFileReplacesPlantedLink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("victim\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "perf-1.map")
	if err := os.Symlink(victim, path); err != nil {
		t.Fatal(err)
	}
	w := newDumpWriter(false, hdrOpts{})
	w.load(1, 0x1000, 0x10, 1, "JS:*f /a.js:1:1")
	ix, _ := readBytes(t, "jit-1.dump", w.bytes())

	m, err := OpenMapFile(os.Getpid(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if n, err := m.Write(ix, false); err != nil || n != 1 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "victim\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Fatalf("%s after Write: %v %v", path, fi, err)
	}
	if b, _ := os.ReadFile(path); string(b) != "1000 10 JS:*f /a.js:1:1\n" {
		t.Errorf("map %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}

	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenMapFile(os.Getpid(), filepath.Join(shared, "perf-1.map")); !errors.Is(err, safedir.ErrUnsafe) || !strings.Contains(err.Error(), "chmod go-w") {
		t.Errorf("-o into a world-writable directory: %v", err)
	}
}
