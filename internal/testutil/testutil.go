// Package testutil holds what stallwatch's tests share: skip helpers that
// say why (and fail instead under STALLWATCH_REQUIRE_PERF=1, so CI proves
// the real paths ran), builders for the target programs in testdata/, and
// Main, the TestMain of the packages whose tests start processes, which
// fails their run when the tests leave files or processes behind.
package testutil

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"unsafe"

	"golang.org/x/sys/unix"
)

// RequireEnv is the variable that turns skips into failures.
const RequireEnv = "STALLWATCH_REQUIRE_PERF"

// Required reports whether skips are forbidden on this machine.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Skip skips t with reason, or fails it when STALLWATCH_REQUIRE_PERF=1.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("%s=1 but this test cannot run: %s", RequireEnv, msg)
	}
	t.Skip(msg)
}

// EndToEnd skips t under -short (make test-short): it runs real target
// processes. Every builder and starter of targets calls it, so a test
// that runs one is end-to-end by definition.
func EndToEnd(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end (runs a target process): skipped with -short")
	}
}

// RequirePerf skips unless perf_event_open works for a software event with
// kernel callchains on this machine.
func RequirePerf(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" {
		Skip(t, "perf_event_open needs Linux")
	}
	if err := probePerf(); err != nil {
		Skip(t, "perf_event_open(cpu-clock) fails here: %v (run as root, or set kernel.perf_event_paranoid=1)", err)
	}
}

var perfOnce struct {
	sync.Once
	err error
}

func probePerf() error {
	perfOnce.Do(func() {
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Sample: 1000,
			Bits:   unix.PerfBitDisabled,
		}
		attr.Sample_type = unix.PERF_SAMPLE_CALLCHAIN
		fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			perfOnce.err = err
			return
		}
		unix.Close(fd)
	})
	return perfOnce.err
}

// RequirePtrace skips unless this process may ptrace its own children
// (root, or CAP_SYS_PTRACE, or Yama allowing it).
func RequirePtrace(t testing.TB) {
	t.Helper()
	if b, err := os.ReadFile("/proc/sys/kernel/yama/ptrace_scope"); err == nil {
		if s := strings.TrimSpace(string(b)); s == "3" {
			Skip(t, "Yama ptrace_scope is 3: ptrace is disabled on this machine")
		}
	}
	if os.Geteuid() != 0 {
		Skip(t, "needs root for ptrace of other processes and /proc/<pid>/stack")
	}
}

// RequireRoot skips unless running as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "needs root")
	}
}

// RequireTool skips unless name is on PATH, and returns its path.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Skip(t, "%s is not installed", name)
	}
	return p
}

// RepoRoot returns the repository's top directory (where go.mod is).
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// Testdata returns the path of elem under the repository's testdata/.
func Testdata(t testing.TB, elem ...string) string {
	return filepath.Join(append([]string{RepoRoot(t), "testdata"}, elem...)...)
}

// BuildGo builds the Go program in testdata/<dir> and returns the binary's
// path (in a per-test temporary directory).
func BuildGo(t testing.TB, dir string) string {
	t.Helper()
	EndToEnd(t)
	return built(t, "go build testdata/"+dir, filepath.Base(dir), func(out string) ([]byte, error) {
		cmd := exec.Command("go", "build", "-o", out, ".")
		cmd.Dir = Testdata(t, dir)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		return cmd.CombinedOutput()
	})
}

// BuildC compiles testdata/<src> with gcc (-O1 -g -pthread
// -fno-omit-frame-pointer plus extra) and returns the binary's path (in a
// per-test temporary directory).
func BuildC(t testing.TB, src string, extra ...string) string {
	t.Helper()
	EndToEnd(t)
	gcc := RequireTool(t, "gcc")
	what := strings.Join(append([]string{"gcc", src}, extra...), " ")
	return built(t, what, strings.TrimSuffix(filepath.Base(src), ".c"), func(out string) ([]byte, error) {
		args := append([]string{"-O1", "-g", "-pthread", "-fno-omit-frame-pointer", "-o", out, Testdata(t, src)}, extra...)
		return exec.Command(gcc, args...).CombinedOutput()
	})
}

// built returns a copy, in the test's temporary directory, of the binary
// name that build makes; what says which build it is. Under Main a build
// runs once per test binary (a package's tests start the same programs
// dozens of times), and each test gets a copy of its own to run, move or
// remove.
func built(t testing.TB, what, name string, build func(out string) ([]byte, error)) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	if buildCache.dir == "" { // not under Main: nothing removes a shared copy
		if out, err := build(dst); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		return dst
	}
	buildCache.mu.Lock()
	b := buildCache.builds[what]
	if b == nil {
		b = &cachedBuild{path: filepath.Join(buildCache.dir, strconv.Itoa(len(buildCache.builds)), name)}
		buildCache.builds[what] = b
	}
	buildCache.mu.Unlock()
	b.once.Do(func() {
		if b.err = os.MkdirAll(filepath.Dir(b.path), 0o755); b.err == nil {
			b.out, b.err = build(b.path)
		}
	})
	if b.err != nil {
		t.Fatalf("%s: %v\n%s", what, b.err, b.out)
	}
	if err := copyFile(b.path, dst, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

func copyFile(from, to string, mode os.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	// A child forked by a parallel test while the copy is open for
	// writing holds that descriptor until it execs, and an exec of the
	// copy in that window fails with ETXTBSY ("text file busy": seen in
	// CI). syscall.ForkLock is the runtime's own guard for this: forks
	// take it exclusively, so no fork happens while the copy is open.
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	return os.WriteFile(to, b, mode)
}

// CopyExecutable copies the program at from to to, executable, so that
// no process this test binary starts can hold it open for writing (see
// copyFile): the copy can be run at once.
func CopyExecutable(t testing.TB, from, to string) {
	t.Helper()
	if err := copyFile(from, to, 0o755); err != nil {
		t.Fatal(err)
	}
}

// buildCache holds the binaries built once per test binary (under Main,
// which makes and removes its directory).
var buildCache struct {
	dir    string
	mu     sync.Mutex
	builds map[string]*cachedBuild // by what built it
}

type cachedBuild struct {
	once sync.Once
	path string
	out  []byte
	err  error
}

// Target is a running test target.
type Target struct {
	Cmd    *exec.Cmd
	Pid    int
	Stdout *bufio.Reader
	stderr Buffer
	done   chan struct{}
	err    error
}

// Start runs path with args, and kills it (and reaps it) when the test
// ends, removing the files its runtime wrote into /tmp for it (perf map,
// jitdump: the JIT tests read them while it runs). The target's stdout is a pipe the test reads with WaitLine; stderr
// is kept for failure messages.
func Start(t testing.TB, path string, args ...string) *Target {
	t.Helper()
	return StartCmd(t, exec.Command(path, args...))
}

// StartCmd is Start for a prepared command (environment, directory).
func StartCmd(t testing.TB, cmd *exec.Cmd) *Target {
	t.Helper()
	EndToEnd(t)
	tg := &Target{Cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &tg.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := StartProcess(cmd); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	tg.Pid = cmd.Process.Pid
	startedPids.Store(tg.Pid, true)
	tg.Stdout = bufio.NewReader(stdout)
	go func() {
		tg.err = cmd.Wait()
		close(tg.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		go io.Copy(io.Discard, tg.Stdout)
		select {
		case <-tg.done:
		case <-time.After(10 * time.Second):
			t.Errorf("target %d did not exit after SIGKILL", tg.Pid)
		}
		removeRuntimeFiles(tg.Pid)
	})
	return tg
}

// StartProcess starts cmd from one OS thread that lives as long as the
// test binary. The kernel sends a child its Pdeathsig when the thread that
// forked it exits, not the process; and the Go runtime ends a thread whose
// goroutine exits locked to it, as the snapshot's ptrace tracers and
// schedclock's pinned probes do. A target forked from such a thread would
// be killed in the middle of a test.
func StartProcess(cmd *exec.Cmd) error {
	spawner.Do(func() {
		spawner.req = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: this thread never exits
			for f := range spawner.req {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.req <- func() { errc <- cmd.Start() }
	return <-errc
}

var spawner struct {
	sync.Once
	req chan func()
}

// WaitLine reads the target's stdout until a line starting with prefix and
// returns that line; it fails the test after timeout or if the target exits.
func (tg *Target) WaitLine(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	type res struct {
		line string
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		for {
			line, err := tg.Stdout.ReadString('\n')
			if strings.HasPrefix(line, prefix) {
				ch <- res{strings.TrimRight(line, "\n"), nil}
				return
			}
			if err != nil {
				ch <- res{"", err}
				return
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("target %d: no line %q on stdout: %v; stderr:\n%s", tg.Pid, prefix, r.err, tg.stderr.String())
		}
		return r.line
	case <-time.After(timeout):
		t.Fatalf("target %d: no line %q within %v; stderr:\n%s", tg.Pid, prefix, timeout, tg.stderr.String())
	}
	return ""
}

// Buffer is a bytes.Buffer safe for concurrent use: what a target, a
// logger or a server's goroutines write while the test reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Done is closed when the target has exited and been reaped.
func (tg *Target) Done() <-chan struct{} { return tg.done }

// ExitErr is the target's exit error once Done is closed.
func (tg *Target) ExitErr() error { return tg.err }

// Stderr returns what the target wrote on stderr so far.
func (tg *Target) Stderr() string { return tg.stderr.String() }

// OpenFDs counts this process's open file descriptors.
func OpenFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents) - 1 // the directory's own fd
}

// ErrTimeout is returned by Eventually when cond never held.
var ErrTimeout = errors.New("condition not met in time")

// Eventually polls cond every 10 ms until it returns true or timeout passes.
func Eventually(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	if cond() {
		return nil
	}
	return ErrTimeout
}

// ThreadCPU is the calling thread's CPU time, from its own clock: the
// caller locks its goroutine to the thread (runtime.LockOSThread) between
// two reads, or they are of two threads and their difference is nothing.
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// CPUTime is the CPU time the live threads of pid have used so far: the
// sum of the scheduler's run time in /proc/PID/task/*/schedstat, in
// nanoseconds (a thread that ended no longer counts).
func CPUTime(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, e := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, e.Name()))
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		var ns int64
		if _, err := fmt.Sscan(f[0], &ns); err == nil {
			sum += time.Duration(ns)
		}
	}
	return sum, nil
}

// WaitCPU waits until the live threads of pid have used cpu of CPU time
// since it was called, at most max, and returns what they used. A test
// that needs a number of samples waits for the CPU time they stand for:
// on a loaded machine a target gets less of it in the same wall time.
func WaitCPU(t testing.TB, pid int, cpu, max time.Duration) time.Duration {
	t.Helper()
	c0, err := CPUTime(pid)
	if err != nil {
		t.Fatalf("CPU time of pid %d: %v", pid, err)
	}
	var used time.Duration
	_ = Eventually(max, func() bool {
		c, err := CPUTime(pid)
		if err != nil {
			return true // the target exited: the caller sees what it got
		}
		used = c - c0
		return used >= cpu
	})
	return used
}

// HeapBytes returns how many bytes the heap allocated while f ran. A fuzz
// target bounds it by its input's size: a parser that believes a length
// read from its input allocates far more than the input holds. Other
// goroutines' allocations count too (a fuzzing worker's own: hundreds of
// KiB seen), so a bound leaves a few MiB for them.
func HeapBytes(f func()) uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	before := s[0].Value.Uint64()
	f()
	metrics.Read(s)
	return s[0].Value.Uint64() - before
}
