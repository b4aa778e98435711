package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

var updateReadme = flag.Bool("update-readme", false, "write what TestMakeDemo's run printed into README.md's demo block (make readme-demo)")

// The README's demo block lies between these lines.
const (
	readmeDemoStart = "<!-- demo output: `make readme-demo` writes this block from a real run of testdata/demo/run.sh; do not edit it by hand -->"
	readmeDemoEnd   = "<!-- end of demo output -->"
)

// TestMakeDemo runs testdata/demo/run.sh — what `make demo` runs — with
// this stallwatch, and checks what a newcomer sees there: the deadlock
// named first, the spinning reconciler's stack down to runtime.goexit, and
// no stack cut short (no frame and no note saying one was). With
// -update-readme it writes the README's demo block from this run.
func TestMakeDemo(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	bash := testutil.RequireTool(t, "bash")
	if !*updateReadme { // which writes into the repository
		t.Parallel() // its demo program, watch and report
	}
	sw := stallwatchBin(t)
	root := testutil.RepoRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, filepath.Join(root, "testdata", "demo", "run.sh"))
	out := t.TempDir()
	if *updateReadme {
		// Where make demo writes (the README shows that path); the
		// capture is removed once read.
		out = "./stallwatch-captures/demo" // run.sh runs in the repository's root
	}
	cmd.Env = append(os.Environ(), "STALLWATCH="+sw, "DEMO_OUT="+out)
	var printedBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &printedBuf, &printedBuf
	err := cmd.Run()
	printed := printedBuf.String()
	if dir := demoCaptureDir(printed); *updateReadme && dir != "" && !filepath.IsAbs(dir) {
		defer os.RemoveAll(filepath.Join(root, dir))
	}
	if err != nil {
		t.Fatalf("run.sh: %v\n%s", err, printed)
	}
	checkDemoText(t, "make demo's output", printed)
	block, err := readmeDemoBlock(printed)
	if err != nil {
		t.Fatalf("%v:\n%s", err, printed)
	}
	checkDemoText(t, "the README block made of it", block)
	if *updateReadme && !t.Failed() {
		if err := writeReadmeDemo(filepath.Join(root, "README.md"), block); err != nil {
			t.Fatal(err)
		}
		t.Logf("README.md's demo block written from this run:\n%s", block)
	}
}

// TestReadmeDemo: the README's demo block shows what make demo must show
// (checkDemoText): a README that shows a truncated stack, or findings in
// another order, fails here rather than with the newcomer.
func TestReadmeDemo(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i, j := strings.Index(s, readmeDemoStart), strings.Index(s, readmeDemoEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md has no demo block between %q and %q", readmeDemoStart, readmeDemoEnd)
	}
	checkDemoText(t, "README.md's demo block", s[i+len(readmeDemoStart):j])
}

var (
	// demoStackRow is a row of a stack table: the stack, then the threads.
	demoStackRow = regexp.MustCompile(`^\s+[0-9.]+%\s+\S+\s+(.*?)\s+\[tids? `)
	// demoFinding is the first line of a finding.
	demoFinding = regexp.MustCompile(`^  \* `)
)

// checkDemoText checks make demo's report as printed (or as the README
// shows it).
func checkDemoText(t *testing.T, what, text string) {
	t.Helper()
	lines := strings.Split(text, "\n")
	var findings []string
	section := ""
	reconciler := ""
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "Findings"), strings.HasPrefix(l, "Threads"), strings.HasPrefix(l, "On-CPU stacks"), strings.HasPrefix(l, "Off-CPU stacks"):
			section = l
		case strings.HasPrefix(section, "Findings") && demoFinding.MatchString(l):
			findings = append(findings, strings.TrimPrefix(l, "  * "))
		case strings.HasPrefix(section, "On-CPU stacks, during") && strings.Contains(l, `"reconciler"]`) && reconciler == "":
			if m := demoStackRow.FindStringSubmatch(l); m != nil {
				reconciler = m[1]
			}
		}
		if strings.Contains(l, "[truncated") || strings.Contains(l, "sampled stacks end before their thread's first function") {
			t.Errorf("%s shows a stack cut short: %s", what, strings.TrimSpace(l))
		}
	}
	if len(findings) == 0 || !strings.HasPrefix(findings[0], "DEADLOCK: ") {
		t.Errorf("%s: the first finding is not the deadlock: %q", what, findings)
	}
	if !strings.HasPrefix(reconciler, "main.reconcile ") || !strings.HasSuffix(reconciler, " ← runtime.goexit") {
		t.Errorf("%s: the reconciler's on-CPU stack is %q, want main.reconcile ← … ← runtime.goexit", what, reconciler)
	}
}

// readmeDemoBlock is what the README shows of make demo's output: where
// the capture is, then the report's head (its version line left out)
// through the off-CPU stacks during the stall, each table cut to its
// first rows (the threads' to its first four and its last, the thread on
// the CPU), with "…" where rows are left out, as the report cuts them.
func readmeDemoBlock(printed string) (string, error) {
	var out []string
	lines := strings.Split(printed, "\n")
	at := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "demo: the capture is in ") {
			out = append(out, l, "")
		}
		if strings.HasPrefix(l, "stallwatch STALL capture of ") {
			at = i
			break
		}
	}
	if len(out) == 0 || at < 0 {
		return "", errors.New("make demo printed no capture directory and report")
	}
	var table []string // the rows of the table being read
	keep, last := 0, false
	flush := func() {
		switch {
		case len(table) <= keep+1 && last, len(table) <= keep:
			out = append(out, table...)
		case last:
			out = append(append(append(out, table[:keep]...), "  …"), table[len(table)-1])
		default:
			out = append(append(out, table[:keep]...), "  …")
		}
		table, keep, last = nil, 0, false
	}
	for _, l := range lines[at:] {
		switch {
		case strings.HasPrefix(l, "On-CPU stacks, before the trigger"), strings.HasPrefix(l, "  … (the whole report"):
			flush()
			return strings.TrimRight(strings.Join(out, "\n"), "\n") + "\n", nil
		case strings.HasPrefix(l, "  stallwatch  "), strings.HasPrefix(l, "  … "):
			continue // the build's version; the report's own "N more below"
		case strings.HasPrefix(l, "Threads ("):
			flush()
			out = append(out, l)
			keep, last = 5, true // the column heads and four threads; the last
			continue
		case strings.HasPrefix(l, "On-CPU stacks"), strings.HasPrefix(l, "Off-CPU stacks"):
			flush()
			out = append(out, l)
			keep = 1
			if strings.HasPrefix(l, "Off-CPU") {
				keep = 4
			}
			continue
		case l == "":
			flush()
		case keep > 0:
			table = append(table, l)
			continue
		}
		out = append(out, l)
	}
	return "", fmt.Errorf("make demo's report has no %q section", "On-CPU stacks, before the trigger")
}

// demoCaptureDir is the capture directory make demo's output names,
// relative to the repository's root ("" when none).
func demoCaptureDir(printed string) string {
	for _, l := range strings.Split(printed, "\n") {
		if dir, ok := strings.CutPrefix(l, "demo: the capture is in "); ok {
			return strings.TrimPrefix(strings.TrimSpace(dir), "./")
		}
	}
	return ""
}

// writeReadmeDemo replaces the README's demo block with block.
func writeReadmeDemo(path, block string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, readmeDemoStart), strings.Index(s, readmeDemoEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no demo block between %q and %q", path, readmeDemoStart, readmeDemoEnd)
	}
	s = s[:i+len(readmeDemoStart)] + "\n```\n" + block + "```\n" + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}
