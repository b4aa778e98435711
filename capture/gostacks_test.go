package capture

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// goStackRoots are the functions a Go thread's stack starts in: every
// goroutine's runtime.goexit, a system stack's runtime.mstart (rt0_go on
// the main thread before the scheduler runs).
var goStackRoots = map[string]bool{"runtime.goexit": true, "runtime.mstart": true, "runtime.rt0_go": true, "runtime.sigtramp": true, "runtime.clone": true}

// goLeafSkips are frameless assembly functions (no frame record: the
// kernel's frame-pointer chain goes from their caller's record to the
// caller's caller) and the callers' callers a stack shows in their place
// when their caller is lost.
var goLeafSkips = map[string][]string{
	"internal/runtime/syscall/linux.Syscall6": {"syscall.Syscall6", "syscall.Syscall", "syscall.RawSyscall"},
	"runtime/internal/syscall.Syscall6":       {"syscall.Syscall6", "syscall.Syscall", "syscall.RawSyscall"},
	"runtime.futex":                           {"runtime.notesleep", "runtime.notetsleep_internal", "runtime.notewakeup"},
	"runtime.usleep":                          {"runtime.mstart1"},
}

// TestGoStacksWhole: in the default mode (--unwind auto), the on-CPU and
// off-CPU stacks of real Go programs reach the first function of their
// thread (runtime.goexit for a goroutine, runtime.mstart for a system
// stack) in 99% of samples or more, and frameless assembly leaves keep
// their callers: gofmt as the Go toolchain built it, gofmt as Go 1.19
// built it (its toolchain from the module proxy), and the demo.
func TestGoStacksWhole(t *testing.T) {
	testutil.RequirePerf(t)
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) *testutil.Target
	}{
		{"gofmt", startGofmt(func(t *testing.T) string { return filepath.Join(goRoot(t, ""), "bin", "gofmt") })},
		{"gofmt built by Go 1.19", startGofmt(func(t *testing.T) string { return filepath.Join(goRoot(t, "go1.19.13"), "bin", "gofmt") })},
		{"demo", startDemo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := tc.start(t)
			_, p, info, _ := recordCPU(t, tg.Pid, 2*time.Second, nil)
			if info.Settings.Unwind != string(UnwindFP) {
				t.Errorf("auto unwinds this pure Go program with %q", info.Settings.Unwind)
			}
			checkGoStacks(t, p)
		})
	}
}

// checkGoStacks checks every sampled stack of a Go program: rooted in
// 99% of on-CPU and of off-CPU samples, and no frameless leaf without its
// caller.
func checkGoStacks(t *testing.T, p *profile.Profile) {
	t.Helper()
	var total, rooted [2]int
	ends := [2]map[string]int{{}, {}}
	for _, s := range p.Sample {
		names := userNames(s)
		if len(names) == 0 {
			continue
		}
		kind := 0
		if len(s.Label["off-cpu"]) > 0 {
			kind = 1
		}
		total[kind]++
		last := names[len(names)-1]
		if goStackRoots[last] {
			rooted[kind]++
		} else {
			ends[kind][last]++
		}
		for i, n := range names[:len(names)-1] {
			if contains(goLeafSkips[n], names[i+1]) {
				t.Errorf("%s's caller is lost: %s", n, strings.Join(names, " ← "))
			}
		}
	}
	for kind, what := range []string{"on-CPU", "off-CPU"} {
		share := float64(rooted[kind]) / float64(max(total[kind], 1))
		t.Logf("%s: %d of %d stacks (%.2f%%) reach their thread's first function", what, rooted[kind], total[kind], 100*share)
		if total[kind] < 20 {
			t.Errorf("%d %s samples: too few to judge", total[kind], what)
		} else if share < 0.99 {
			t.Errorf("%s: %.2f%% of stacks reach runtime.goexit or runtime.mstart, want 99%%; they end in: %s", what, 100*share, topCounts(ends[kind], 8))
		}
	}
}

// userNames are a sample's user frames' functions, innermost first
// (inlined calls included), truncation pseudo-frames kept.
func userNames(s *profile.Sample) []string {
	var names []string
	for _, l := range s.Location {
		if l.Address >= 0xffff800000000000 || l.Mapping != nil && strings.HasPrefix(l.Mapping.File, "[kernel") {
			continue
		}
		for _, ln := range l.Line {
			names = append(names, ln.Function.Name)
		}
	}
	return names
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func topCounts(m map[string]int, n int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	var parts []string
	for _, k := range keys[:min(n, len(keys))] {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

// goRoot is the GOROOT of the Go toolchain version (""): the one that
// runs the tests), fetched through the module proxy by the go command
// (GOTOOLCHAIN) the first time.
func goRoot(t testing.TB, version string) string {
	t.Helper()
	goCmd := testutil.RequireTool(t, "go")
	cmd := exec.Command(goCmd, "env", "GOROOT")
	cmd.Dir = t.TempDir() // outside the module: its go line picks no toolchain
	if version != "" {
		cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+version)
	}
	out, err := cmd.Output()
	if err != nil {
		testutil.Skip(t, "the Go toolchain %s: %v (GOTOOLCHAIN=%s go env GOROOT fetches it through the module proxy)", version, err, version)
	}
	return strings.TrimSpace(string(out))
}

// startGofmt runs a gofmt over the Go tree's sources, simplifying and
// rewriting (a real Go program nobody here wrote: parsing, printing and
// garbage collection in goroutines, reading files in system calls), until
// the test ends.
func startGofmt(bin func(t *testing.T) string) func(t *testing.T) *testutil.Target {
	return func(t *testing.T) *testutil.Target {
		gofmt := bin(t)
		if _, err := os.Stat(gofmt); err != nil {
			testutil.Skip(t, "no gofmt: %v", err)
		}
		cmd := exec.Command(gofmt, "-l", "-s", "-r", "a -> a", filepath.Join(goRoot(t, ""), "src"))
		tg := testutil.StartCmd(t, cmd)
		testutil.WaitCPU(t, tg.Pid, 200*time.Millisecond, 20*time.Second)
		return tg
	}
}

// startDemo runs testdata/demo (the bank service of make demo) until its
// threads deadlock and its reconciler spins.
func startDemo(t *testing.T) *testutil.Target {
	bin := testutil.BuildGo(t, "demo")
	tg := testutil.Start(t, bin, "--heartbeat", filepath.Join(t.TempDir(), "beat"), "--every", "100ms", "--healthy-for", "200ms")
	tg.WaitLine(t, "deadlocking", 20*time.Second)
	return tg
}
