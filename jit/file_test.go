package jit

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A FIFO or a directory named by mistake is an error, at once.
func TestReadFileNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir} {
		if _, _, err := ReadFile(p, Options{}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("ReadFile(%s) = %v", p, err)
		}
		if _, err := Inspect(p, Options{}); err == nil {
			t.Errorf("Inspect(%s) read it", p)
		}
	}
}
