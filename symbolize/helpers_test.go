package symbolize

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/jit"
	"github.com/stallwatch/stallwatch/model"
)

// Targets are built once per test binary, on first use, into buildDir.
var (
	buildDir  string
	buildMu   sync.Mutex
	buildDone = map[string]string{}
)

func TestMain(m *testing.M) {
	if os.Getenv("SYMBOLIZE_AS_NOBODY") == "1" {
		asNobody()
		return
	}
	dir, err := os.MkdirTemp("", "symbolize-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	testutil.Main(m, func() { os.RemoveAll(dir) })
}

// built returns the output of a build step, running it once per key.
// make receives a fresh directory and returns the built file's path.
func built(t testing.TB, key string, make func(dir string) (string, error)) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := buildDone[key]; ok {
		return p
	}
	dir := filepath.Join(buildDir, key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := make(dir)
	if err != nil {
		t.Fatalf("build %s: %v", key, err)
	}
	buildDone[key] = p
	return p
}

func run(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// cProg builds testdata/symbols/<src> with the compiler and flags given
// (the foundation's BuildC flags plus extra).
func cProg(t testing.TB, compiler, src string, extra ...string) string {
	t.Helper()
	testutil.EndToEnd(t)
	cc := testutil.RequireTool(t, compiler)
	key := strings.NewReplacer("/", "_", " ", "_", "=", "_").Replace(compiler + "-" + src + "-" + strings.Join(extra, "-"))
	return built(t, key, func(dir string) (string, error) {
		out := filepath.Join(dir, strings.TrimSuffix(strings.TrimSuffix(src, ".c"), ".cpp"))
		args := append([]string{"-O1", "-g", "-pthread", "-fno-omit-frame-pointer", "-o", out, testutil.Testdata(t, "symbols", src)}, extra...)
		return out, run(dir, cc, args...)
	})
}

// goProg builds testdata/symbols/goprog with extra go build flags.
func goProg(t testing.TB, flags ...string) string {
	t.Helper()
	testutil.EndToEnd(t)
	key := "goprog" + strings.ReplaceAll(strings.Join(flags, ""), " ", "_")
	key = strings.NewReplacer("=", "_", "-", "_").Replace(key)
	return built(t, key, func(dir string) (string, error) {
		out := filepath.Join(dir, "goprog")
		cmd := exec.Command("go", append(append([]string{"build", "-o", out}, flags...), ".")...)
		cmd.Dir = testutil.Testdata(t, "symbols", "goprog")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build: %v\n%s", err, b)
		}
		return out, nil
	})
}

// target is a running test program and what it printed before "ready".
type target struct {
	*testutil.Target
	lines []string
}

func startTarget(t testing.TB, path string, args ...string) *target {
	t.Helper()
	tg := testutil.Start(t, path, args...)
	var lines []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		line := tg.WaitLine(t, "", time.Until(deadline))
		if line == "ready" {
			break
		}
		lines = append(lines, line)
	}
	return &target{Target: tg, lines: lines}
}

// field returns the fields of the first printed line starting with prefix.
func (tg *target) field(t testing.TB, prefix string) []string {
	t.Helper()
	for _, l := range tg.lines {
		if strings.HasPrefix(l, prefix+" ") {
			return strings.Fields(l)
		}
	}
	t.Fatalf("target printed no %q line; it printed:\n%s", prefix, strings.Join(tg.lines, "\n"))
	return nil
}

func hexArg(t testing.TB, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatalf("bad address %q: %v", s, err)
	}
	return v
}

func atoi(t testing.TB, s string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("bad number %q: %v", s, err)
	}
	return v
}

// testOptions says what a test asks of a Process: what package target
// would give it.
type testOptions struct {
	Kernel, JIT bool
	DebugDirs   []string
}

// testProcess is a Process over an address space and JIT sources opened
// for it, as package target opens them.
type testProcess struct {
	*Process
	space *addrspace.Space
	jit   *jit.Process
}

// openTest opens pid's address space (and its JIT sources) and a Process
// over it.
func openTest(pid int, o testOptions) (*testProcess, error) {
	space, err := addrspace.Open(pid, addrspace.Options{DebugDirs: o.DebugDirs})
	if err != nil {
		return nil, err
	}
	tp := &testProcess{space: space}
	if o.JIT {
		if tp.jit, err = jit.OpenProcess(pid, jit.Options{}); err != nil {
			space.Close()
			return nil, err
		}
	}
	tp.Process = New(space, Options{Kernel: o.Kernel, JIT: tp.jit})
	return tp, nil
}

// Close releases the space and the JIT sources.
func (tp *testProcess) Close() error {
	if tp.jit != nil {
		tp.jit.Close()
	}
	return tp.space.Close()
}

// Refresh reads the maps and JIT sources again, as target.Refresh does.
func (tp *testProcess) Refresh() error {
	err := tp.space.Refresh()
	if tp.jit != nil {
		tp.jit.Update()
	}
	tp.Process.Refresh()
	return err
}

// newTestProcess opens a Process and closes it at the end of the test.
func newTestProcess(t testing.TB, pid int, o testOptions) *testProcess {
	t.Helper()
	p, err := openTest(pid, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// lineOf returns the 1-based line of the first line of the source file
// containing s.
func lineOf(t testing.TB, file, s string) int64 {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			return int64(i + 1)
		}
	}
	t.Fatalf("%s has no line with %q", file, s)
	return 0
}

func describe(l *model.Location) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%#x kind=%v", l.Addr, l.Kind)
	if l.Mapping != nil {
		fmt.Fprintf(&b, " mapping=%s", l.Mapping.File)
	}
	for _, ln := range l.Lines {
		fmt.Fprintf(&b, " [%s (%s) %s:%d]", ln.Function, ln.SystemName, ln.File, ln.Line)
	}
	return b.String()
}

// asNobody is TestNewProcessErrors' child, run as an unprivileged user:
// it prints what opening root's process 1 says.
func asNobody() {
	_, err := openTest(1, testOptions{})
	var pe *perms.Error
	if errors.As(err, &pe) {
		fmt.Println("perms.Error:", err)
		os.Exit(0)
	}
	fmt.Println("NewProcess(1) as nobody:", err)
	os.Exit(1)
}
