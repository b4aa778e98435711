package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/jit"
)

// runJitCmd runs `stallwatch jit args...` in-process.
func runJitCmd(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(append([]string{"jit"}, args...), &o, &e)
	return code, o.String(), e.String()
}

// nodeJitdump has Node.js write a jitdump of a few hundred generated
// functions and exit; it returns the file.
func nodeJitdump(t *testing.T) string {
	t.Helper()
	node := testutil.RequireTool(t, "node")
	dir := t.TempDir()
	cmd := exec.Command(node, "--perf-prof", testutil.Testdata(t, "node", "manyfuncs.js"), "300")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node: %v\n%s", err, out)
	}
	dumps, _ := filepath.Glob(filepath.Join(dir, "jit-*.dump"))
	if len(dumps) != 1 {
		t.Fatalf("node wrote %v", dumps)
	}
	return dumps[0]
}

type jitNode struct {
	*testutil.Target
	dir   string
	stdin io.WriteCloser
}

// startJitNode runs testdata/node/fib.js under node with flags, in a
// fresh directory writable by uid (0: ours), as uid.
func startJitNode(t *testing.T, uid uint32, flags ...string) *jitNode {
	t.Helper()
	node := testutil.RequireTool(t, "node")
	dir := t.TempDir()
	if uid != 0 {
		// t.TempDir's parent is private: the target needs a directory
		// of its own to write its jitdump in.
		testutil.RequireRoot(t)
		var err error
		if dir, err = os.MkdirTemp("", "stallwatch-jit-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	script := testutil.Testdata(t, "node", "fib.js")
	cmd := exec.Command(node, append(flags, script)...)
	cmd.Dir = dir
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	tg := testutil.StartCmd(t, cmd)
	t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)) })
	tg.WaitLine(t, "ready", 30*time.Second)
	return &jitNode{tg, dir, stdin}
}

func TestJitHelp(t *testing.T) {
	code, out, _ := runJitCmd("--help")
	if code != 0 || !strings.Contains(out, "  inspect ") || !strings.Contains(out, "node --perf-prof") {
		t.Errorf("jit --help: exit %d\n%s", code, out)
	}
	for _, sub := range []string{"inspect", "symbolize", "tomap"} {
		code, out, errOut := runJitCmd(sub, "--help")
		if code != 0 || !strings.Contains(out, "Usage: stallwatch jit "+sub) || errOut != "" {
			t.Errorf("jit %s --help: exit %d\n%s\nstderr: %s", sub, code, out, errOut)
		}
	}
}

func TestJitUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "a command is needed"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"inspect"}, "one FILE"},
		{[]string{"inspect", "a", "b"}, "one FILE"},
		{[]string{"symbolize", "0x1"}, "--pid is required"},
		{[]string{"symbolize", "--pid", "1"}, "at least one address"},
		{[]string{"symbolize", "--pid", "1", "xyz"}, "not a hex number"},
		{[]string{"tomap"}, "--pid is required"},
		{[]string{"tomap", "--pid", "1", "extra"}, "unexpected arguments"},
		{[]string{"tomap", "--pid", "1", "--interval", "0s"}, "--interval"},
	} {
		code, _, errOut := runJitCmd(c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("jit %q: exit %d, stderr %q; want 2 and %q", c.args, code, errOut, c.want)
		}
	}
	if code, _, errOut := runJitCmd("inspect", filepath.Join(t.TempDir(), "missing.dump")); code != 1 || !strings.Contains(errOut, "no such file") {
		t.Errorf("inspect of a missing file: exit %d, %q", code, errOut)
	}
	if code, _, errOut := runJitCmd("symbolize", "--pid", "999999999", "0x10"); code != 1 || !strings.Contains(errOut, "999999999") {
		t.Errorf("symbolize of a missing pid: exit %d, %q", code, errOut)
	}
}

// inspect on a jitdump Node.js wrote: text and JSON agree with the file.
func TestJitInspect(t *testing.T) {
	dump := nodeJitdump(t)
	code, out, errOut := runJitCmd("inspect", dump)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"jitdump", "written by v8", "little-endian", "elf_mach 62 (x86-64)", "CODE_LOAD", "time span", "ns CLOCK_MONOTONIC", "largest"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runJitCmd("inspect", "--format", "json", dump)
	var sum struct {
		Symbols int `json:"symbols"`
		Records int `json:"records"`
		Header  struct {
			Pid     int `json:"pid"`
			ElfMach int `json:"elf_mach"`
		} `json:"header"`
		Counts  map[string]int `json:"counts"`
		Largest []struct {
			Start   uint64 `json:"start"`
			Display string `json:"display"`
		} `json:"largest"`
	}
	if err := json.Unmarshal([]byte(out), &sum); code != 0 || err != nil {
		t.Fatalf("inspect --format json: exit %d, %v\n%s", code, err, out)
	}
	want, _ := jit.Inspect(dump, jit.Options{})
	if sum.Symbols != want.Symbols || sum.Symbols < 300 || sum.Records != want.Info.Records || sum.Header.Pid == 0 ||
		sum.Header.ElfMach != 62 || len(sum.Largest) == 0 || sum.Counts["CODE_LOAD"] == 0 {
		t.Errorf("JSON summary = %d symbols, %d records, pid %d; Inspect says %d symbols, %d records\n%s",
			sum.Symbols, sum.Records, sum.Header.Pid, want.Symbols, want.Info.Records, out)
	}
	// Every key snake_case, as snapshot --format json and capture.json.
	if keys := regexp.MustCompile(`"([A-Za-z_]+)":`).FindAllStringSubmatch(out, -1); len(keys) == 0 {
		t.Error("no keys")
	} else {
		for _, k := range keys {
			if k[1] != strings.ToLower(k[1]) && k[1] != "CODE_LOAD" && !strings.HasPrefix(k[1], "CODE_") {
				t.Errorf("key %q is not snake_case", k[1])
			}
		}
	}
}

// A jitdump whose framing breaks: inspect names the offset and exits 1.
func TestJitInspectBroken(t *testing.T) {
	b := make([]byte, 40+16)
	copy(b, []byte{0x44, 0x54, 0x69, 0x4a, 1, 0, 0, 0, 40}) // magic LE, version 1, total_size 40
	b[40+4] = 3                                             // a record of 3 bytes
	path := filepath.Join(t.TempDir(), "jit-1.dump")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runJitCmd("inspect", path)
	if code != 1 || !strings.Contains(out, "offset 40 (0x28)") || !strings.Contains(errOut, "offset 40") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// symbolize names fibonacci at an address inside it, from the live
// process's jitdump, and says "?" where no JIT code is.
func TestJitSymbolize(t *testing.T) {
	tg := startJitNode(t, 0, "--perf-prof")
	p, err := jit.OpenProcess(tg.Pid, jit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var fib *jit.Symbol
	for s := range p.Index().All() {
		if s.Display == "fibonacci" {
			fib = s
		}
	}
	p.Close()
	if fib == nil {
		t.Fatal("no fibonacci")
	}
	addr := fib.Start + 0x10
	code, out, errOut := runJitCmd("symbolize", "--pid", strconv.Itoa(tg.Pid), fmt.Sprintf("%#x", addr), "1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := fmt.Sprintf("%#x fibonacci+0x10 %s:%d (v8, %s, ", addr, fib.File, fib.Line, fib.Name)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], want) || lines[1] != "0x1 ?" {
		t.Errorf("symbolize printed:\n%s\nwant a line starting %q and \"0x1 ?\"", out, want)
	}
}

// tomap writes the target's jitdump as /tmp/perf-<pid>.map, owned by the
// target's user, and the map names the code the jitdump does.
func TestJitToMapOwnedByTarget(t *testing.T) {
	const nobody = 65534
	tg := startJitNode(t, nobody, "--perf-prof")
	// What the jitdump holds now is in the map written after.
	p, err := jit.OpenProcess(tg.Pid, jit.Options{NoPerfMap: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	code, out, errOut := runJitCmd("tomap", "--pid", strconv.Itoa(tg.Pid))
	mapPath := fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)
	if code != 0 || !strings.Contains(out, "to "+mapPath) {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	fi, err := os.Stat(mapPath)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != nobody || fi.Mode().Perm() != 0o644 {
		t.Errorf("%s: uid %d, mode %v; want uid %d, 0644", mapPath, st.Uid, fi.Mode(), nobody)
	}
	ix, info, err := jit.ReadFile(mapPath, jit.Options{})
	if err != nil || info.Bad != 0 || info.Symbols < 100 {
		t.Fatalf("the map reads back as %+v, %v", info, err)
	}
	n := 0
	for s := range p.Index().All() {
		if s.Display != "fibonacci" {
			continue
		}
		n++
		if m, ok := ix.Lookup(s.Start); !ok || m.Start != s.Start || m.Size != s.Size || m.Name != s.Name {
			t.Errorf("map at %#x: %+v; jitdump: %+v", s.Start, m, s)
		}
	}
	if n == 0 {
		t.Error("no fibonacci in the jitdump")
	}
	leftovers, _ := filepath.Glob(fmt.Sprintf("/tmp/.perf-%d.map.*", tg.Pid))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

// A process without a jitdump: tomap says where it looked and writes
// nothing.
func TestJitToMapWithoutJitdump(t *testing.T) {
	tg := startJitNode(t, 0)
	code, _, errOut := runJitCmd("tomap", "--pid", strconv.Itoa(tg.Pid))
	if code != 1 || !strings.Contains(errOut, "no jitdump") || !strings.Contains(errOut, fmt.Sprintf("jit-%d.dump", tg.Pid)) {
		t.Errorf("exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)); !os.IsNotExist(err) {
		t.Errorf("a map was written: %v", err)
	}
}

// A process that writes its own perf map keeps it.
func TestJitToMapLeavesTheTargetsOwnMap(t *testing.T) {
	tg := startJitNode(t, 0, "--perf-prof", "--perf-basic-prof")
	mapPath := fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)
	before, err := os.Stat(mapPath)
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runJitCmd("tomap", "--pid", strconv.Itoa(tg.Pid))
	if code != 1 || !strings.Contains(errOut, "writes "+mapPath+" itself") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	after, err := os.Stat(mapPath)
	if err != nil || !os.SameFile(before, after) {
		t.Errorf("the target's perf map was replaced")
	}
	out := filepath.Join(t.TempDir(), "copy.map")
	if code, _, errOut := runJitCmd("tomap", "--pid", strconv.Itoa(tg.Pid), "-o", out, "--display-names"); code != 0 {
		t.Fatalf("tomap -o: exit %d: %s", code, errOut)
	}
	b, _ := os.ReadFile(out)
	if !bytes.Contains(b, []byte(" fibonacci\n")) {
		t.Errorf("-o %s with --display-names lacks fibonacci", out)
	}
}

// lockedBuf is a bytes.Buffer a command writes while the test reads.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runJitBackground runs `stallwatch jit args...` in-process on its own
// goroutine; the channel gets its exit code.
func runJitBackground(args ...string) (stdout, stderr *lockedBuf, code chan int) {
	stdout, stderr, code = &lockedBuf{}, &lockedBuf{}, make(chan int, 1)
	go func() { code <- run(append([]string{"jit"}, args...), stdout, stderr) }()
	return stdout, stderr, code
}

// tomap --follow keeps the map current while the target compiles new
// code, stops cleanly on Ctrl-C, and stops by itself when the target exits.
func TestJitToMapFollow(t *testing.T) {
	tg := startJitNode(t, 0, "--perf-prof")
	out := filepath.Join(t.TempDir(), "follow.map")
	args := []string{"tomap", "--pid", strconv.Itoa(tg.Pid), "-o", out, "--follow", "--interval", "100ms"}
	stdout, stderr, code := runJitBackground(args...)
	if err := testutil.Eventually(20*time.Second, func() bool { return strings.Contains(stdout.String(), "wrote") }); err != nil {
		t.Fatalf("no first write: %s", stderr)
	}
	name := fmt.Sprintf("followed_%d", time.Now().UnixNano()%1e6)
	fmt.Fprintf(tg.stdin, "compile %s\n", name)
	err := testutil.Eventually(20*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		if bytes.Contains(b, []byte(name)) {
			return true
		}
		// V8 buffers its jitdump writes: more code pushes them out.
		fmt.Fprintf(tg.stdin, "compile %s_push\n", name)
		return false
	})
	if err != nil {
		t.Fatalf("%s never reached the map; stderr: %s", name, stderr)
	}
	// Ctrl-C: run's signal handler is installed while it runs.
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("after Ctrl-C: exit %d; stderr: %s", c, stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tomap --follow ignored Ctrl-C")
	}
	if tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".follow.map.*")); len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
	if b, err := os.ReadFile(out); err != nil || !bytes.Contains(b, []byte(name)) {
		t.Errorf("the map did not stay: %v", err)
	}

	// Until the target exits.
	stdout, stderr, code = runJitBackground(args...)
	if err := testutil.Eventually(20*time.Second, func() bool { return strings.Contains(stdout.String(), "wrote") }); err != nil {
		t.Fatalf("no first write: %s", stderr)
	}
	tg.Cmd.Process.Kill()
	select {
	case c := <-code:
		if c != 0 || !strings.Contains(stdout.String(), fmt.Sprintf("pid %d exited", tg.Pid)) {
			t.Errorf("exit %d, stdout %q, stderr %q", c, stdout, stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tomap --follow outlived its target")
	}
}
