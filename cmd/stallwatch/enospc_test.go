package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestRecordNoSpace: a capture into a 5 MiB tmpfs that fills up (ENOSPC)
// fails, says so, and leaves no capture directory behind, whole or not;
// once there is room again, the next capture is written.
func TestRecordNoSpace(t *testing.T) {
	t.Parallel() // its tmpfs, under its own directory
	testutil.RequirePerf(t)
	testutil.RequireRoot(t)
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=5m,mode=0755", "tmpfs", mnt).CombinedOutput(); err != nil {
		testutil.Skip(t, "no tmpfs to mount here: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	out := filepath.Join(mnt, "captures")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	// Every block taken.
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 6<<20), 0o644); err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("filling the tmpfs: %v", err)
	}
	tg := startBeater(t, marker())
	record := func() (string, error) {
		c := exec.Command(stallwatchBin(t), "record", "--pid", strconv.Itoa(tg.Pid), "--duration", "1s", "--out", out)
		b, err := c.CombinedOutput()
		return string(b), err
	}
	msg, err := record()
	if err == nil {
		t.Fatalf("a capture into a full filesystem succeeded:\n%s", msg)
	}
	if !strings.Contains(msg, "no space left on device") {
		t.Errorf("the failure does not say ENOSPC:\n%s", msg)
	}
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		t.Errorf("left in --out after ENOSPC: %s", e.Name())
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if msg, err := record(); err != nil {
		t.Fatalf("with room again: %v\n%s", err, msg)
	}
	ents, _ = os.ReadDir(out)
	if len(ents) != 1 {
		t.Errorf("%d entries after a capture with room (%v), want its directory", len(ents), time.Since(start))
	}
}
