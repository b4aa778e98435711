package jit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

var sleeper struct {
	sync.Once
	dir, path string
	out       []byte
	err       error
}

func TestMain(m *testing.M) {
	testutil.Main(m, func() {
		if sleeper.dir != "" {
			os.RemoveAll(sleeper.dir)
		}
	})
}

// sleeperPath builds the repository's testdata/sleeper, a static program that only sleeps:
// a target that maps no jitdump and runs in an empty chroot.
func sleeperPath(t *testing.T) string {
	t.Helper()
	testutil.EndToEnd(t)
	sleeper.Do(func() {
		if sleeper.dir, sleeper.err = os.MkdirTemp("", "stallwatch-jit-sleeper-"); sleeper.err != nil {
			return
		}
		// Targets running as another user must reach it.
		if sleeper.err = os.Chmod(sleeper.dir, 0o755); sleeper.err != nil {
			return
		}
		sleeper.path = filepath.Join(sleeper.dir, "sleeper")
		cmd := exec.Command("go", "build", "-o", sleeper.path, ".")
		cmd.Dir = testutil.Testdata(t, "sleeper")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		sleeper.out, sleeper.err = cmd.CombinedOutput()
	})
	if sleeper.err != nil {
		t.Fatalf("build sleeper: %v\n%s", sleeper.err, sleeper.out)
	}
	return sleeper.path
}

// startSleeper runs the sleeper in dir with env (added to ours) and attr.
func startSleeper(t *testing.T, dir string, env []string, attr *syscall.SysProcAttr) *testutil.Target {
	t.Helper()
	cmd := exec.Command(sleeperPath(t))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = attr
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 30*time.Second)
	return tg
}

// juliaDump is a jitdump as LLVM's listener writes one for Julia.
func juliaDump() []byte {
	w := newDumpWriter(false, hdrOpts{})
	w.debug(1, 0x1000, dbgEntry{0x1000 + debugAddrBias, 3, 0, "/app/fib.jl"})
	w.load(2, 0x1000, 0x100, 1, "julia_fibonacci_1234")
	return w.bytes()
}

func writeAt(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Where runtimes leave jitdumps they do not map: discovery looks in the
// target's cwd, /tmp, $JITDUMPDIR, the .debug/jit directories of
// $JITDUMPDIR and $HOME (from the target's environment), and given dirs.
func TestDiscoverJitdumpPlaces(t *testing.T) {
	for _, c := range []struct {
		how  string
		env  func(dir string) []string
		path func(dir string, pid int) string
		opts func(dir string) Options
		rt   Runtime
	}{
		{how: "cwd", path: func(dir string, pid int) string { return filepath.Join(dir, fmt.Sprintf("jit-%d.dump", pid)) }},
		{how: "/tmp", path: func(_ string, pid int) string { return fmt.Sprintf("/tmp/jit-%d.dump", pid) }},
		{how: "$JITDUMPDIR",
			env:  func(dir string) []string { return []string{"JITDUMPDIR=" + dir + "/dumps"} },
			path: func(dir string, pid int) string { return filepath.Join(dir, "dumps", fmt.Sprintf("jit-%d.dump", pid)) }},
		{how: "$JITDUMPDIR", rt: RuntimeLLVM,
			env: func(dir string) []string { return []string{"JITDUMPDIR=" + dir} },
			path: func(dir string, pid int) string {
				return filepath.Join(dir, ".debug/jit/llvm-IR-jit-20250101-a1b2c3", fmt.Sprintf("jit-%d.dump", pid))
			}},
		{how: "$JITDUMPDIR", // relative: to the target's cwd
			env: func(string) []string { return []string{"JITDUMPDIR=rel"} },
			path: func(dir string, pid int) string {
				return filepath.Join(dir, "cwd", "rel", fmt.Sprintf("jit-%d.dump", pid))
			}},
		{how: "$HOME/.debug/jit",
			env: func(dir string) []string { return []string{"HOME=" + dir + "/home"} },
			path: func(dir string, pid int) string {
				return filepath.Join(dir, "home/.debug/jit/llvm-IR-jit-20250101-x9y8z7", fmt.Sprintf("jit-%d.dump", pid))
			}},
		{how: "option",
			opts: func(dir string) Options { return Options{Dirs: []string{dir + "/extra"}} },
			path: func(dir string, pid int) string { return filepath.Join(dir, "extra", fmt.Sprintf("jit-%d.dump", pid)) }},
	} {
		t.Run(c.how, func(t *testing.T) {
			dir := t.TempDir()
			cwd := filepath.Join(dir, "cwd")
			os.MkdirAll(cwd, 0o755)
			var env []string
			if c.env != nil {
				env = c.env(dir)
			}
			tg := startSleeper(t, cwd, env, nil)
			root := dir
			if c.how == "cwd" {
				root = cwd
			}
			path := c.path(root, tg.Pid)
			t.Cleanup(func() { os.Remove(path) })
			var opts Options
			if c.opts != nil {
				opts = c.opts(dir)
			}
			p, err := OpenProcess(tg.Pid, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if n := len(p.Sources()); n != 0 {
				t.Fatalf("sources before the file exists: %+v", p.Sources())
			}
			// Written after the process started, found by the next Update.
			writeAt(t, path, juliaDump())
			if err := p.Update(); err != nil {
				t.Fatal(err)
			}
			srcs := p.Sources()
			if len(srcs) != 1 || srcs[0].Path != path || srcs[0].How != c.how || srcs[0].Refused {
				t.Fatalf("sources = %+v; want %s found as %q", srcs, path, c.how)
			}
			s, ok := p.Index().Lookup(0x1080)
			if !ok || s.Display != "fibonacci" || s.File != "/app/fib.jl" || s.Line != 3 || s.Runtime != RuntimeLLVM || s.Source != path {
				t.Errorf("Lookup = %+v", s)
			}
			if !strings.Contains(strings.Join(p.Searched(), " "), path) {
				t.Errorf("Searched %v lacks %s", p.Searched(), path)
			}
		})
	}
}

// A file discovery may not trust is refused, with the reason, and read
// once it becomes trustworthy.
func TestDiscoverTrust(t *testing.T) {
	testutil.RequireRoot(t)
	const nobody = 65534
	good := []byte("1000 10 JS:*trusted /a.js:1:1\n")
	for _, c := range []struct {
		name   string
		uid    uint32 // the target's
		setup  func(t *testing.T, path string)
		reason string // "" = trusted
		fix    func(t *testing.T, path string)
	}{
		{name: "owned by another user", setup: func(t *testing.T, path string) {
			writeAt(t, path, good)
			os.Chown(path, 12345, 12345)
		}, reason: "owned by uid 12345, neither the target's user (uid 0) nor root",
			fix: func(t *testing.T, path string) { os.Chown(path, 0, 0) }},
		{name: "owned by the target's user", uid: nobody, setup: func(t *testing.T, path string) {
			writeAt(t, path, good)
			os.Chown(path, nobody, nobody)
		}},
		{name: "owned by root", uid: nobody, setup: func(t *testing.T, path string) { writeAt(t, path, good) }},
		{name: "owned by another user than the target's", uid: nobody, setup: func(t *testing.T, path string) {
			writeAt(t, path, good)
			os.Chown(path, 12345, 12345)
		}, reason: "owned by uid 12345, neither the target's user (uid 65534) nor root"},
		{name: "a symbolic link", setup: func(t *testing.T, path string) {
			real := filepath.Join(t.TempDir(), "real.map")
			writeAt(t, real, good)
			os.Symlink(real, path)
		}, reason: "a symbolic link"},
		{name: "a fifo", setup: func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, reason: "not a regular file",
			fix: func(t *testing.T, path string) { os.Remove(path); writeAt(t, path, good) }},
		{name: "older than the process", setup: func(t *testing.T, path string) {
			writeAt(t, path, good)
			old := time.Now().Add(-time.Hour)
			os.Chtimes(path, old, old)
		}, reason: "before the process started",
			fix: func(t *testing.T, path string) { writeAt(t, path, good) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var attr *syscall.SysProcAttr
			if c.uid != 0 {
				attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.uid}}
			}
			tg := startSleeper(t, "/", nil, attr)
			path := fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)
			t.Cleanup(func() { os.Remove(path) })
			c.setup(t, path)
			p, err := OpenProcess(tg.Pid, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			srcs := p.Sources()
			if len(srcs) != 1 || srcs[0].Path != path {
				t.Fatalf("sources = %+v", srcs)
			}
			_, found := p.Index().Lookup(0x1000)
			if c.reason == "" {
				if srcs[0].Refused || !found {
					t.Fatalf("trusted file refused: %+v", srcs[0])
				}
				return
			}
			if !srcs[0].Refused || !strings.Contains(srcs[0].Reason, c.reason) || found {
				t.Fatalf("source = %+v; want refused for %q", srcs[0], c.reason)
			}
			if c.fix == nil {
				return
			}
			c.fix(t, path)
			if err := p.Update(); err != nil {
				t.Fatal(err)
			}
			if _, ok := p.Index().Lookup(0x1000); !ok || p.Sources()[0].Refused {
				t.Errorf("after the fix: %+v", p.Sources())
			}
		})
	}
}

// A target in a chroot and its own pid namespace: its files are named by
// the pid it sees (1) and read inside its root, and a link that points
// out of the root reaches nothing of ours.
func TestDiscoverInChrootAndPidNamespace(t *testing.T) {
	testutil.RequireRoot(t)
	root := t.TempDir()
	bin := filepath.Join(root, "sleeper")
	b, err := os.ReadFile(sleeperPath(t))
	if err != nil {
		t.Fatal(err)
	}
	writeAt(t, bin, b)
	os.Chmod(bin, 0o755)
	os.MkdirAll(filepath.Join(root, "tmp"), 0o1777)

	// A host directory the target's links try to reach.
	host := t.TempDir()
	writeAt(t, filepath.Join(host, "jit-1.dump"), juliaDump())
	// Its cwd is its root "/": jit-1.dump there is a link out of it.
	if err := os.Symlink(filepath.Join(host, "jit-1.dump"), filepath.Join(root, "jit-1.dump")); err != nil {
		t.Fatal(err)
	}
	// $HOME/.debug is a link to the host directory's parent.
	os.MkdirAll(filepath.Join(root, "home"), 0o755)
	os.MkdirAll(filepath.Join(host, "jit", "llvm-IR-jit-x"), 0o755)
	writeAt(t, filepath.Join(host, "jit", "llvm-IR-jit-x", "jit-1.dump"), juliaDump())
	if err := os.Symlink(host, filepath.Join(root, "home", ".debug")); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("/sleeper")
	cmd.Env = []string{"HOME=/home"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Cloneflags: syscall.CLONE_NEWPID}
	tg := testutil.StartCmd(t, cmd)
	if line := tg.WaitLine(t, "ready", 30*time.Second); line != "ready 1" {
		t.Fatalf("the target says %q, want pid 1 in its namespace", line)
	}
	// Its perf map, as it would write it: /tmp/perf-1.map in its root.
	writeAt(t, filepath.Join(root, "tmp", "perf-1.map"), []byte("2000 10 JS:*inside /a.js:1:1\n"))

	p, err := OpenProcess(tg.Pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.NSpid() != 1 {
		t.Errorf("NSpid = %d, want 1", p.NSpid())
	}
	var read []string
	for _, s := range p.Sources() {
		if !s.Refused {
			read = append(read, s.Path)
		}
	}
	if len(read) != 1 || read[0] != "/tmp/perf-1.map" {
		t.Errorf("read %q; want only /tmp/perf-1.map (sources %+v)", read, p.Sources())
	}
	if s, ok := p.Index().Lookup(0x2000); !ok || s.Display != "inside" {
		t.Errorf("Lookup(0x2000) = %+v", s)
	}
	if s, ok := p.Index().Lookup(0x1000); ok {
		t.Errorf("read a host file through a link out of the target's root: %+v", s)
	}
}

// TestSetMemoryMap: names a reader of the target's memory found are
// looked up as a perf map's, and a later set replaces them.
func TestSetMemoryMap(t *testing.T) {
	tg := testutil.Start(t, "/bin/sleep", "600")
	p, err := OpenProcess(tg.Pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const path = "[memory: test]"
	if err := p.SetMemoryMap(path, []MapEntry{{0x1000, 0x100, "long Hot.fibonacci(long)"}, {0x2000, 0x10, "evil\nname"}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(); err != nil {
		t.Fatal(err)
	}
	ix := p.Index()
	if s, ok := ix.Lookup(0x1010); !ok || s.Name != "long Hot.fibonacci(long)" || s.Runtime != RuntimeJVM {
		t.Errorf("0x1010: %+v %v", s, ok)
	}
	if s, ok := ix.Lookup(0x2000); !ok || s.Name != "evil name" {
		t.Errorf("a name with a line break: %+v %v", s, ok)
	}
	if err := p.SetMemoryMap(path, []MapEntry{{0x3000, 0x100, "void A.b()"}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(); err != nil {
		t.Fatal(err)
	}
	ix = p.Index()
	if _, ok := ix.Lookup(0x1010); ok {
		t.Error("the replaced set's names are still there")
	}
	if s, ok := ix.Lookup(0x3001); !ok || s.Name != "void A.b()" {
		t.Errorf("0x3001: %+v %v", s, ok)
	}
	var memory []SourceInfo
	for _, s := range p.Sources() {
		if s.How == "memory" {
			memory = append(memory, s)
		}
	}
	if len(memory) != 1 || memory[0].Path != path || memory[0].Symbols != 1 {
		t.Errorf("sources %+v", memory)
	}
}
