package jit

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// nodeTarget is a live Node.js running testdata/node/<script>.
type nodeTarget struct {
	*testutil.Target
	dir   string // its working directory (where --perf-prof writes)
	stdin io.WriteCloser
}

// startNode runs node with flags on a script from testdata/node, in a
// fresh working directory, and waits for its "ready" line. A perf map it
// writes in /tmp is removed when the test ends.
func startNode(t *testing.T, script string, flags ...string) *nodeTarget {
	t.Helper()
	node := testutil.RequireTool(t, "node")
	dir := t.TempDir()
	args := append(append([]string{}, flags...), testutil.Testdata(t, "node", script))
	cmd := exec.Command(node, args...)
	cmd.Dir = dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	tg := testutil.StartCmd(t, cmd)
	t.Cleanup(func() { os.Remove(fmt.Sprintf("/tmp/perf-%d.map", tg.Pid)) })
	tg.WaitLine(t, "ready", 30*time.Second)
	return &nodeTarget{tg, dir, stdin}
}

// sourceLine is the line of the first appearance of text in a testdata
// file: what a symbol's line must say.
func sourceLine(t *testing.T, path, text string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		if strings.Contains(sc.Text(), text) {
			return n
		}
	}
	t.Fatalf("%q not in %s", text, path)
	return 0
}

func symbolsNamed(ix *Index, display, source string) []*Symbol {
	var out []*Symbol
	for s := range ix.All() {
		if s.Display == display && (source == "" || s.Source == source) {
			out = append(out, s)
		}
	}
	return out
}

// Node.js with --perf-prof and --perf-basic-prof: discovery finds the
// jitdump through the process's mappings and the perf map in its /tmp;
// fibonacci resolves by name, and both files give it the same range.
func TestNodeJitdumpAndPerfMapAgree(t *testing.T) {
	started := monotime.Now()
	tg := startNode(t, "fib.js", "--perf-prof", "--perf-basic-prof")
	p, err := OpenProcess(tg.Pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	dumpPath := filepath.Join(tg.dir, fmt.Sprintf("jit-%d.dump", tg.Pid))
	var sawDump, sawMap bool
	for _, s := range p.Sources() {
		switch {
		case s.Kind == KindJitdump && s.Path == dumpPath && s.How == "maps" && s.Runtime == RuntimeV8:
			sawDump = s.Symbols > 100 && s.Broken == nil
		case s.Kind == KindPerfMap && s.Path == fmt.Sprintf("/tmp/perf-%d.map", tg.Pid):
			sawMap = s.Symbols > 100 && s.Bad == 0
		}
	}
	if !sawDump || !sawMap {
		t.Fatalf("sources = %+v; want the mapped jitdump %s and the perf map", p.Sources(), dumpPath)
	}

	ix := p.Index()
	fibs := symbolsNamed(ix, "fibonacci", dumpPath)
	if len(fibs) == 0 {
		t.Fatalf("no fibonacci in the jitdump")
	}
	script := testutil.Testdata(t, "node", "fib.js")
	line := sourceLine(t, script, "function fibonacci(")
	now := monotime.Now()
	maps, err := OpenProcess(tg.Pid, Options{NoJitdump: true})
	if err != nil {
		t.Fatal(err)
	}
	defer maps.Close()
	for _, f := range fibs {
		if f.File != script || f.Line != line || f.Runtime != RuntimeV8 || !strings.HasPrefix(f.Name, "JS:") {
			t.Errorf("fibonacci = %+v, want %s:%d", f, script, line)
		}
		// Records are stamped with CLOCK_MONOTONIC, the samples' clock.
		if f.Loaded < started || f.Loaded > now {
			t.Errorf("fibonacci loaded at %d, outside the process's life [%d, %d]", f.Loaded, started, now)
		}
		mid := f.Start + f.Size/2
		if got, ok := ix.LookupAt(mid, now); !ok || got.Display != "fibonacci" {
			t.Errorf("LookupAt(%#x) = %+v", mid, got)
		}
		if got, ok := ix.LookupAt(mid, f.Loaded-1); ok && got == f {
			t.Errorf("LookupAt(%#x) before its load found it", mid)
		}
		m, ok := maps.Index().Lookup(f.Start)
		if !ok || m.Start != f.Start || m.Size != f.Size || m.Name != f.Name {
			t.Errorf("perf map at %#x = %+v; jitdump says [%#x, +%#x) %q", f.Start, m, f.Start, f.Size, f.Name)
		}
	}
}

// The jitdump grows while the process runs: Update reads the new code.
func TestNodeUpdateReadsNewCode(t *testing.T) {
	tg := startNode(t, "fib.js", "--perf-prof")
	p, err := OpenProcess(tg.Pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	name := fmt.Sprintf("fresh_%d", time.Now().UnixNano()%1e6)
	if len(symbolsNamed(p.Index(), name, "")) != 0 {
		t.Fatal("found before it exists")
	}
	before := p.Index()
	fmt.Fprintf(tg.stdin, "compile %s\n", name)
	tg.WaitLine(t, "compiled "+name, 30*time.Second)
	// V8 writes through a stdio buffer: the records reach the file when
	// it fills or flushes, so keep reading until they appear.
	err = testutil.Eventually(20*time.Second, func() bool {
		if err := p.Update(); err != nil {
			t.Fatal(err)
		}
		if len(symbolsNamed(p.Index(), name, "")) == 0 {
			fmt.Fprintf(tg.stdin, "compile %s_more\n", name) // push the buffer out
			return false
		}
		return true
	})
	if err != nil {
		t.Fatalf("%s never appeared: %v", name, p.Sources())
	}
	if len(symbolsNamed(before, name, "")) != 0 {
		t.Error("an Index handed out earlier changed")
	}
}

// V8's --perf-prof-delete-file unlinks the jitdump once it is open: it is
// read through /proc/<pid>/map_files.
func TestNodeDeletedJitdump(t *testing.T) {
	tg := startNode(t, "fib.js", "--perf-prof", "--perf-prof-delete-file")
	if _, err := os.Stat(filepath.Join(tg.dir, fmt.Sprintf("jit-%d.dump", tg.Pid))); !os.IsNotExist(err) {
		t.Fatalf("the jitdump is still there: %v", err)
	}
	p, err := OpenProcess(tg.Pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	srcs := p.Sources()
	if len(srcs) != 1 || srcs[0].How != "maps (deleted)" || srcs[0].Symbols == 0 {
		t.Fatalf("sources = %+v", srcs)
	}
	if len(symbolsNamed(p.Index(), "fibonacci", "")) == 0 {
		t.Error("fibonacci not found in the deleted jitdump")
	}
	if err := p.Update(); err != nil {
		t.Errorf("Update: %v", err)
	}
}
