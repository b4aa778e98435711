package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestMain gives every stallwatch the tests run a runtime directory of
// their own ($XDG_RUNTIME_DIR: where snapshot keeps its stop marks), so
// that no test writes to the machine's /run, and the binaries the tests
// build once a directory, buildDir, removed with the runtime directory
// when they end.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stallwatch-runtime-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_RUNTIME_DIR", dir)
	buildDir = filepath.Join(dir, "bin")
	testutil.Main(m, func() { os.RemoveAll(dir) })
}

// buildDir holds the binaries the tests build once (builtOnce,
// stallwatchForSnapshot).
var buildDir string

// buildTemp makes a directory for one binary the tests build once.
func buildTemp(prefix string) (string, error) {
	if err := os.MkdirAll(buildDir, 0o755); err != nil {
		return "", err
	}
	return os.MkdirTemp(buildDir, prefix)
}
