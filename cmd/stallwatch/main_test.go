package main

import (
	"fmt"
	"os"
	"testing"
)

// TestMain gives every stallwatch the tests run a runtime directory of
// their own ($XDG_RUNTIME_DIR: where snapshot keeps its stop marks), so
// that no test writes to the machine's /run.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stallwatch-runtime-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_RUNTIME_DIR", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
