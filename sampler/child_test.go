package sampler

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// childEnv selects a child mode of the test binary: the permission tests
// run it as nobody, sampling itself.
const childEnv = "SAMPLER_TEST_CHILD"

// runChild runs a child mode if asked; it reports whether it ran one. It
// prints "ok" or the error, and exits 3 on a *perms.Error.
func runChild() bool {
	mode := os.Getenv(childEnv)
	if mode == "" {
		return false
	}
	cfg := Config{PID: os.Getpid(), Freq: 99}
	switch mode {
	case "kernel":
		cfg.Kernel = true
	case "user":
	case "offcpu":
		cfg.OffCPU = true
	case "nofile":
		// Room for the test binary's own descriptors and a few threads.
		cfg.PID, _ = strconv.Atoi(os.Getenv(childEnv + "_PID"))
		lim := unix.Rlimit{Cur: 24, Max: 24}
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	case "mlock":
		// No locked memory of our own beyond perf_event_mlock_kb.
		_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{})
		cfg.RingBytes = 8 << 20
	}
	s, err := Start(cfg)
	if err != nil {
		fmt.Println(err)
		var pe *perms.Error
		if errors.As(err, &pe) {
			os.Exit(3)
		}
		os.Exit(1)
	}
	s.Close()
	fmt.Println("ok")
	os.Exit(0)
	return true
}

// runAsNobody runs this test binary's child mode as user nobody.
func runAsNobody(t *testing.T, mode string) (string, int) {
	t.Helper()
	testutil.RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sampler-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sampler.test")
	copyFile(t, self, bin)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Dir = "/"
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run as nobody: %v", err)
	}
	return strings.TrimSpace(string(out)), code
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// Past RLIMIT_NOFILE's hard limit, the error says so with the numbers.
func TestNoFileLimit(t *testing.T) {
	testutil.RequirePerf(t)
	tg := startTarget(t, "spin", "-threads", "16", "-depth", "1")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=nofile", fmt.Sprintf("%s_PID=%d", childEnv, tg.Pid))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("child: %v: %s", err, out)
	}
	for _, w := range []string{"RLIMIT_NOFILE is 24 (hard limit 24)", "file descriptors", "ulimit -Hn", "LimitNOFILE"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("error lacks %q: %s", w, out)
		}
	}
}

// Without privileges, a user is told what is missing and how to get it;
// user-only sampling of one's own process still works at paranoid 2.
func TestPermissionErrors(t *testing.T) {
	testutil.RequirePerf(t)
	paranoid, ok := perms.Paranoid()
	if !ok || paranoid < 2 {
		testutil.Skip(t, "kernel.perf_event_paranoid is %d: unprivileged kernel callchains are allowed here", paranoid)
	}
	cases := []struct {
		mode string
		code int
		want []string
	}{
		{"kernel", 3, []string{"perf_event_paranoid", "CAP_PERFMON", fmt.Sprintf("(it is %d)", paranoid), "sysctl kernel.perf_event_paranoid=1", "setcap", "--no-kernel"}},
		{"offcpu", 3, []string{"perf_event_paranoid", "CAP_PERFMON", "--no-offcpu"}},
		{"user", 0, []string{"ok"}},
		{"mlock", 3, []string{"perf_event_mlock_kb", "CAP_IPC_LOCK", "RLIMIT_MEMLOCK", "sudo sysctl kernel.perf_event_mlock_kb="}},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			out, code := runAsNobody(t, c.mode)
			t.Logf("exit %d: %s", code, out)
			if code != c.code {
				t.Errorf("exit code %d, want %d; output: %s", code, c.code, out)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q: %s", w, out)
				}
			}
		})
	}
}
