package testutil

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Main runs a package's tests (call it from TestMain, after any re-exec
// helper mode) and fails the run when they left something behind, so that
// a leak cannot come back unnoticed:
//
//   - files: the test binary and everything it starts get a temporary
//     directory of their own ($TMPDIR, mode 1777 as /tmp); whatever is in
//     it once the tests and cleanups have run was left by a test (an
//     os.MkdirTemp never removed, a browser's profile) and is named and
//     removed;
//   - the files the runtimes write into /tmp whatever $TMPDIR says
//     (perf-PID.map of Node.js, the JVM, CPython -X perf and stallwatch's
//     own perf maps; jit-PID.dump of CPython -X perf_jit; the JVM's attach
//     files) for a process of this test binary's, still there at the end;
//   - processes: the test binary leads a process group of its own, which
//     every target inherits, forked grandchildren and orphans included;
//     one of the group, or a child that left it (Setpgid, setsid), still
//     alive at the end was not reaped by its test.
//
// Under Main, BuildGo and BuildC build each program once per test binary.
//
// cleanups run after the tests, before the checks (RemoveJavaClasses, a
// package's shared directories). Main does not return.
func Main(m *testing.M, cleanups ...func()) {
	h, err := startHygiene()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testutil.Main:", err)
		os.Exit(1)
	}
	code := m.Run()
	for _, f := range cleanups {
		f()
	}
	if leaks := h.finish(); len(leaks) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the tests left behind (removed now):\n\t%s\n", strings.Join(leaks, "\n\t"))
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// hostTempDir is $TMPDIR as it was before Main gave the tests their own.
var hostTempDir string

// HostTempDir is the host's temporary directory, for what is meant to
// outlive a run (a benchmark's cache of generated inputs), which under
// Main's $TMPDIR would be removed and reported as left behind.
func HostTempDir() string {
	if hostTempDir != "" {
		return hostTempDir
	}
	return os.TempDir()
}

// runtimeTmpFile matches what runtimes write into /tmp named by a pid.
var runtimeTmpFile = regexp.MustCompile(`^(?:perf-(\d+)\.map|jit-(\d+)\.dump|\.java_pid(\d+)|\.attach_pid(\d+))$`)

type hygiene struct {
	tmpdir   string // the test binary's $TMPDIR
	group    int    // the process group the test binary leads, 0 if none
	inotify  int
	mu       sync.Mutex
	runtimes map[string]bool // /tmp files of the group's processes
}

func startHygiene() (*hygiene, error) {
	h := &hygiene{runtimes: map[string]bool{}, inotify: -1}
	pid := os.Getpid()
	if err := syscall.Setpgid(0, 0); err == nil {
		h.group = pid
	} // else a session leader already (run by hand under setsid): no group check
	// Short: unix sockets under it are bounded to 108 bytes of path.
	dir, err := os.MkdirTemp("", "swtest-"+strings.TrimSuffix(filepath.Base(os.Args[0]), ".test")+"-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o1777); err != nil {
		return nil, err
	}
	h.tmpdir = dir
	hostTempDir = os.TempDir()
	os.Setenv("TMPDIR", dir)
	if buildCache.dir, err = os.MkdirTemp(dir, "builds-"); err != nil {
		return nil, err
	}
	buildCache.builds = map[string]*cachedBuild{}
	if h.group != 0 {
		h.watchRuntimeFiles()
	}
	return h, nil
}

// watchRuntimeFiles notes each pid-named runtime file created in /tmp by a
// process of the test binary's group (asked while it runs: the file is
// made at its start, and the process may be gone at the end).
func (h *hygiene) watchRuntimeFiles() {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return
	}
	if _, err := unix.InotifyAddWatch(fd, "/tmp", unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return
	}
	h.inotify = fd
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fd, buf)
			if err != nil {
				if err == unix.EINTR {
					continue
				}
				return // closed by finish
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				nameLen := int(uint32(buf[off+12]) | uint32(buf[off+13])<<8 | uint32(buf[off+14])<<16 | uint32(buf[off+15])<<24)
				name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+nameLen], "\x00"))
				off += unix.SizeofInotifyEvent + nameLen
				h.noteRuntimeFile(name)
			}
		}
	}()
}

func (h *hygiene) noteRuntimeFile(name string) {
	m := runtimeTmpFile.FindStringSubmatch(name)
	if m == nil {
		return
	}
	pid := 0
	for _, s := range m[1:] {
		if s != "" {
			pid, _ = strconv.Atoi(s)
		}
	}
	if g, ok := processGroup(pid); ok && g == h.group || started(pid) {
		h.mu.Lock()
		h.runtimes[filepath.Join("/tmp", name)] = true
		h.mu.Unlock()
	}
}

// finish removes and names what the tests left: files in $TMPDIR, the
// group's runtime files in /tmp, processes of the group still alive.
func (h *hygiene) finish() []string {
	var leaks []string
	leaks = append(leaks, h.leakedProcesses()...)
	if h.inotify >= 0 {
		unix.Close(h.inotify)
	}
	h.mu.Lock()
	for p := range h.runtimes {
		if _, err := os.Lstat(p); err == nil {
			leaks = append(leaks, p)
			os.Remove(p)
		}
	}
	h.mu.Unlock()
	os.RemoveAll(buildCache.dir)
	entries, _ := os.ReadDir(h.tmpdir)
	for _, e := range entries {
		leaks = append(leaks, "$TMPDIR/"+e.Name())
	}
	os.RemoveAll(h.tmpdir)
	sort.Strings(leaks)
	return leaks
}

// leakedProcesses kills and names the processes of the test binary's group
// (other than itself) that outlived the tests, after giving the ones just
// killed by a cleanup a moment to be gone.
func (h *hygiene) leakedProcesses() []string {
	if h.group == 0 {
		return nil
	}
	var alive []int
	_ = Eventually(5*time.Second, func() bool {
		alive = groupMembers(h.group)
		return len(alive) == 0
	})
	var leaks []string
	for _, pid := range alive {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		leaks = append(leaks, fmt.Sprintf("process %d: %s", pid, strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))))
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return leaks
}

// groupMembers lists the live processes (not zombies) of process group
// group and the caller's live children, but the caller.
func groupMembers(group int) []int {
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		f := statFields(pid)
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if f[1] == strconv.Itoa(self) || f[2] == strconv.Itoa(group) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processGroup reads pid's process group from /proc/PID/stat.
func processGroup(pid int) (int, bool) {
	f := statFields(pid)
	if len(f) < 3 {
		return 0, false
	}
	g, err := strconv.Atoi(f[2])
	return g, err == nil
}

// statFields returns /proc/PID/stat's fields after the command's name
// (state, ppid, pgrp, …).
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// startedPids are the targets StartCmd started, for runtime files of those
// that left the test binary's group.
var startedPids sync.Map

func started(pid int) bool {
	_, ok := startedPids.Load(pid)
	return ok
}

// removeRuntimeFiles removes the files the runtimes write into /tmp for
// pid (perf map, jitdump, JVM attach files): what a killed target cannot.
func removeRuntimeFiles(pid int) {
	p := strconv.Itoa(pid)
	for _, name := range []string{"perf-" + p + ".map", "jit-" + p + ".dump", ".java_pid" + p, ".attach_pid" + p} {
		os.Remove(filepath.Join("/tmp", name))
	}
}
