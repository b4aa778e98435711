package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// nobody is the unprivileged user the permission tests run as.
const nobody = 65534

// asNobody runs the stallwatch binary as user nobody with no capability,
// in dir, and returns its exit code and output.
func asNobody(t *testing.T, bin, dir string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

// unprivileged sets up a run as nobody: the stallwatch binary where
// nobody can run it, a directory nobody owns, and a target of nobody's.
func unprivileged(t *testing.T) (bin, dir string, target int) {
	t.Helper()
	testutil.RequireRoot(t)
	base := t.TempDir()
	for d := base; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin = filepath.Join(base, "stallwatch")
	testutil.CopyExecutable(t, stallwatchBin(t), bin)
	dir = filepath.Join(base, "nobody")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "echo ready; exec sleep 600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 10*time.Second)
	return bin, dir, tg.Pid
}

// TestNotPermittedOnce: as a user without privilege, what is missing is
// said once, all of it, with the fixes; and the flags it offers are enough.
func TestNotPermittedOnce(t *testing.T) {
	bin, dir, pid := unprivileged(t)
	paranoid, ok := perms.Paranoid()
	if !ok {
		testutil.Skip(t, "kernel.perf_event_paranoid is unreadable")
	}
	code, _, stderr := asNobody(t, bin, dir, "record", "-p", strconv.Itoa(pid), "--duration", "1s", "--out", "caps")
	switch {
	case paranoid <= 1:
		if code != exitOK {
			t.Fatalf("kernel.perf_event_paranoid %d allows everything; exit %d\n%s", paranoid, code, stderr)
		}
		return
	case code != exitNotPermitted:
		t.Fatalf("exit %d, want %d (not permitted)\n%s", code, exitNotPermitted, stderr)
	}
	if n := strings.Count(stderr, "cannot record"); n != 1 || strings.Contains(stderr, "recording pid") {
		t.Errorf("want one message before any recording, got %d:\n%s", n, stderr)
	}
	for _, want := range []string{
		"as user nobody",
		"off-CPU samples",
		"kernel.perf_event_paranoid <= 1 (it is " + strconv.Itoa(paranoid) + ")",
		"sudo setcap cap_perfmon",
		"+ep " + bin,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the message lacks %q:\n%s", want, stderr)
		}
	}
	if paranoid != 2 {
		return // at 3, no flag lets an unprivileged user sample
	}
	// At 2 a user may sample their own processes without kernel frames
	// or context switches: the one message says both flags at once.
	for _, want := range []string{"on-CPU samples with kernel frames", "sudo sysctl kernel.perf_event_paranoid=1", "Or ask for less: --no-kernel --no-offcpu"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the message lacks %q:\n%s", want, stderr)
		}
	}
	code, stdout, stderr := asNobody(t, bin, dir, "record", "-p", strconv.Itoa(pid), "--duration", "1s", "--out", "caps", "--no-kernel", "--no-offcpu", "--quiet")
	if code != exitOK {
		t.Fatalf("with the flags the message offers: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, strings.TrimSpace(stdout), "profile.pb.gz")); err != nil {
		t.Errorf("no profile written: %v (stdout %q)", err, stdout)
	}
}

// TestSettingsCheckedAtStart: every bad setting is said at once, before
// anything is watched or recorded, with how to fix it.
func TestSettingsCheckedAtStart(t *testing.T) {
	tg := testutil.Start(t, "/bin/sh", "-c", "echo ready; exec sleep 600")
	tg.WaitLine(t, "ready", 10*time.Second)
	pid := strconv.Itoa(tg.Pid)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"rates and --out at once", []string{"watch", "-p", pid, "--heartbeat-proc", "--freq", "1000000", "--baseline-freq", "500000", "--out", file}, exitUsage,
			[]string{"cannot watch pid " + pid, "--freq 1000000: above", "use --freq", "--baseline-freq 500000: above", "--out " + file + ": it is a file, not a directory"}},
		{"record: --out found unwritable before recording", []string{"record", "-p", pid, "--duration", "1h", "--out", "/proc/stallwatch"}, exitUsage,
			[]string{"cannot record pid " + pid, "--out /proc/stallwatch: it does not exist, and cannot be made in /proc"}},
		{"a process that does not exist", []string{"record", "-p", "999999999"}, exitFailure, []string{"stallwatch record: no process 999999999\n"}},
		{"watch, the same", []string{"watch", "-p", "999999999", "--heartbeat-proc"}, exitFailure, []string{"stallwatch watch: no process 999999999\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), "recording pid") || strings.Contains(stderr.String(), "watching") {
				t.Errorf("started before the check failed:\n%s", stderr.String())
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("took %v to refuse", d)
			}
		})
	}
}

// TestReadOnlyOut: --out on a read-only mount is refused at start. The
// mount is made in a mount namespace of the test's own (unshare -m).
func TestReadOnlyOut(t *testing.T) {
	testutil.RequireRoot(t)
	unshare := testutil.RequireTool(t, "unshare")
	tg := testutil.Start(t, "/bin/sh", "-c", "echo ready; exec sleep 600")
	tg.WaitLine(t, "ready", 10*time.Second)
	ro := t.TempDir()
	script := `mount -t tmpfs -o ro tmpfs "$1" && exec "$2" watch -p "$3" --heartbeat-proc --out "$1/captures"`
	cmd := exec.Command(unshare, "-m", "--propagation", "private", "/bin/sh", "-c", script, "sh", ro, stallwatchBin(t), strconv.Itoa(tg.Pid))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "cannot be made in "+ro+": on a read-only file system") {
		t.Errorf("%v\n%s", err, out)
	}
}
