package testutil

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cgroup is a cgroup a test made below the test binary's own, in one
// hierarchy, and removes when the test ends (after the test's targets,
// which are killed first: cleanups run last-registered first).
type Cgroup struct {
	// Dir is its directory; Path its path in the hierarchy, as
	// /proc/<pid>/cgroup shows it.
	Dir, Path string
}

// NewCgroupV1 makes a cgroup in the v1 hierarchy of controller ("cpu",
// "memory"). It skips (fails under STALLWATCH_REQUIRE_PERF=1) where the
// hierarchy is not mounted or not writable.
func NewCgroupV1(t testing.TB, controller string) *Cgroup {
	t.Helper()
	return newCgroup(t, controller)
}

// NewCgroupV2 makes a cgroup in the unified (v2) hierarchy.
func NewCgroupV2(t testing.TB) *Cgroup {
	t.Helper()
	return newCgroup(t, "")
}

func newCgroup(t testing.TB, controller string) *Cgroup {
	RequireRoot(t)
	mount, root, err := cgroupMount(controller)
	if err != nil {
		Skip(t, "%v", err)
	}
	own, err := ownCgroup(controller)
	if err != nil {
		Skip(t, "%v", err)
	}
	rel, ok := strings.CutPrefix(own, root)
	if !ok {
		Skip(t, "this process's cgroup %s is outside the mount of %s at %s", own, root, mount)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := fmt.Sprintf("stallwatch-test-%d-%s", os.Getpid(), hex.EncodeToString(b[:]))
	c := &Cgroup{Dir: filepath.Join(mount, rel, name), Path: filepath.Join(own, name)}
	if err := os.Mkdir(c.Dir, 0o755); err != nil {
		Skip(t, "cannot make a cgroup: %v", err)
	}
	t.Cleanup(func() { c.remove(t) })
	return c
}

// Set writes value to the cgroup's file.
func (c *Cgroup) Set(t testing.TB, file, value string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.Dir, file), []byte(value), 0); err != nil {
		t.Fatalf("cgroup %s: %v", c.Path, err)
	}
}

// Add moves process pid (all its threads) into the cgroup.
func (c *Cgroup) Add(t testing.TB, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(c.Dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatalf("moving pid %d into cgroup %s: %v", pid, c.Path, err)
	}
}

// Command is exec.Command(path, args...) that runs in the cgroup from
// its first instruction: a shell moves itself in, then execs path (the
// pid stays the same).
func (c *Cgroup) Command(path string, args ...string) *exec.Cmd {
	return exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, c.Dir, path}, args...)...)
}

// remove moves whatever is left in the cgroup to its parent and removes
// it; a process killed a moment ago may take a while to leave.
func (c *Cgroup) remove(t testing.TB) {
	parent := filepath.Join(filepath.Dir(c.Dir), "cgroup.procs")
	var last error
	if Eventually(10*time.Second, func() bool {
		if b, err := os.ReadFile(filepath.Join(c.Dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				_ = os.WriteFile(parent, []byte(f), 0)
			}
		}
		last = os.Remove(c.Dir)
		return last == nil || errors.Is(last, os.ErrNotExist)
	}) != nil {
		t.Errorf("cgroup %s could not be removed: %v", c.Dir, last)
	}
}

// cgroupMount finds where the hierarchy of controller ("" for v2) is
// mounted, and the cgroup the mount shows there.
func cgroupMount(controller string) (point, root string, err error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 {
			continue
		}
		switch {
		case controller == "" && g[0] == "cgroup2":
			return f[4], f[3], nil
		case controller != "" && g[0] == "cgroup":
			for _, o := range strings.Split(g[2], ",") {
				if o == controller {
					return f[4], f[3], nil
				}
			}
		}
	}
	if controller == "" {
		return "", "", errors.New("no cgroup2 file system is mounted")
	}
	return "", "", fmt.Errorf("no v1 cgroup hierarchy with the %s controller is mounted", controller)
}

// ownCgroup is this process's cgroup in the hierarchy of controller.
func ownCgroup(controller string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		id, rest, _ := strings.Cut(line, ":")
		ctrls, p, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if controller == "" && id == "0" && ctrls == "" {
			return p, nil
		}
		for _, c := range strings.Split(ctrls, ",") {
			if controller != "" && c == controller {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("this process is in no %q cgroup", controller)
}
