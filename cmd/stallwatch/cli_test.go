package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/child"
	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/cli/clitest"
	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// leaves lists every runnable command of the table with its path.
func leaves() [][]*cli.Command {
	var out [][]*cli.Command
	var walk func(path []*cli.Command, cs []*cli.Command)
	walk = func(path []*cli.Command, cs []*cli.Command) {
		for _, c := range cs {
			p := append(slices.Clone(path), c)
			if len(c.Commands) > 0 {
				walk(p, c.Commands)
				continue
			}
			out = append(out, p)
		}
	}
	walk(nil, newApp(&globals{}).Commands)
	return out
}

func names(path []*cli.Command) []string {
	var n []string
	for _, c := range path {
		n = append(n, c.Name)
	}
	return n
}

// TestEveryCommand: help on stdout with exit 0 for every command, --pid
// listed with two dashes and -p wherever a command takes a pid, and
// --log-format on every command.
func TestEveryCommand(t *testing.T) {
	app := newApp(&globals{})
	for _, path := range leaves() {
		name := strings.Join(names(path), " ")
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(names(path), "--help")
			if code := run(args, &stdout, &stderr); code != exitOK || stderr.Len() > 0 {
				t.Fatalf("--help: exit %d, stderr %q", code, stderr.String())
			}
			help := stdout.String()
			var viaHelp bytes.Buffer
			run(append([]string{"help"}, names(path)...), &viaHelp, &stderr)
			if viaHelp.String() != help {
				t.Errorf("'stallwatch help %s' differs from '%s --help'", name, name)
			}
			fs := app.FlagSet(path[len(path)-1])
			if pid := fs.Lookup("pid"); pid != nil {
				if pid.Short != "p" || !strings.Contains(help, "-p, --pid PID") {
					t.Errorf("--pid without -p, or not listed as '-p, --pid PID':\n%s", help)
				}
			}
			if fs.Lookup("log-format") == nil || !strings.Contains(help, "--log-format FORMAT") {
				t.Errorf("no --log-format")
			}
			for _, f := range fs.Flags() {
				if !strings.Contains(help, "--"+f.Name) {
					t.Errorf("help does not list --%s", f.Name)
				}
			}
		})
	}
}

func TestTopLevel(t *testing.T) {
	tests := []struct {
		args         []string
		code         int
		stdout, errs string
	}{
		{[]string{"--help"}, exitOK, "Commands:\n  watch ", ""},
		{[]string{"-h"}, exitOK, "Commands:\n  watch ", ""},
		{[]string{"help"}, exitOK, "Commands:\n  watch ", ""},
		{[]string{"--version"}, exitOK, "stallwatch ", ""},
		{[]string{"-v"}, exitOK, "stallwatch ", ""},
		{[]string{"version"}, exitOK, "stallwatch ", ""},
		{nil, exitUsage, "", "Usage:\n  stallwatch COMMAND"},
		{[]string{"wathc"}, exitUsage, "", `unknown command "wathc" (did you mean "watch"?)`},
		{[]string{"help", "wathc"}, exitUsage, "", `unknown command "wathc"`},
		{[]string{"--pid", "3"}, exitUsage, "", "a command comes first"},
		{[]string{"record", "--pdi", "3"}, exitUsage, "", "unknown flag --pdi (did you mean --pid?)\nRun 'stallwatch record --help' for usage."},
	}
	for _, tc := range tests {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != tc.code || (tc.stdout != "" && !strings.Contains(stdout.String(), tc.stdout)) || (tc.errs != "" && !strings.Contains(stderr.String(), tc.errs)) {
			t.Errorf("%q: exit %d\nstdout %q\nstderr %q\nwant exit %d, stdout with %q, stderr with %q", tc.args, code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.errs)
		}
		if tc.code == exitOK && stderr.Len() > 0 {
			t.Errorf("%q: stderr %q", tc.args, stderr.String())
		}
		if tc.code == exitUsage && stdout.Len() > 0 {
			t.Errorf("%q: a usage error wrote to stdout: %q", tc.args, stdout.String())
		}
	}
}

// TestExitCodes: errors map to exit codes by their type, however wrapped.
func TestExitCodes(t *testing.T) {
	pe := &perms.Error{Op: "perf_event_open", Err: unix.EACCES}
	tests := []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{errors.New("boom"), exitFailure},
		{cli.UsageErrorf("bad"), exitUsage},
		{&cli.CommandError{Path: "stallwatch x", Err: fmt.Errorf("ctx: %w", cli.UsageErrorf("bad"))}, exitUsage},
		{pe, exitNotPermitted},
		{&cli.CommandError{Path: "stallwatch x", Err: fmt.Errorf("capture: %w", pe)}, exitNotPermitted},
		{exitStatus(42), 42},
		{&cli.CommandError{Path: "stallwatch watch", Err: exitStatus(143)}, 143},
		{&cli.CommandError{Path: "stallwatch watch", Err: &child.StartError{Name: "/x", Err: unix.ENOENT}}, 127},
		{&cli.CommandError{Path: "stallwatch watch", Err: &child.StartError{Name: "/x", Err: unix.EACCES}}, 126},
		// A message that reads like one of them is still a failure.
		{errors.New("not permitted: usage"), exitFailure},
	}
	for _, tc := range tests {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestJSONErrorLine(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"snapshot", "--log-format", "json", "--pid", "999999999"}, &stdout, &stderr)
	if code != exitFailure || !strings.HasPrefix(stderr.String(), "{") || !strings.Contains(stderr.String(), `"level":"ERROR"`) ||
		!strings.Contains(stderr.String(), `"exit_code":1`) || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("exit %d, stderr %q: want one JSON error line", code, stderr.String())
	}
}

func script(t *testing.T, shell string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run([]string{"completion", shell}, &stdout, &stderr); code != exitOK {
		t.Fatalf("completion %s: exit %d %s", shell, code, stderr.String())
	}
	return stdout.Bytes()
}

func TestCompletion(t *testing.T) {
	t.Parallel() // its bash and zsh
	self := strconv.Itoa(os.Getpid())
	cases := []struct {
		line      string
		want, not []string
	}{
		{"stallwatch ", []string{"watch", "record", "snapshot", "report", "jit", "completion", "man", "help", "version"}, nil},
		{"stallwatch watch --fr", []string{"--freq"}, nil},
		{"stallwatch watch --heartbeat-", []string{"--heartbeat-file", "--heartbeat-statsd", "--heartbeat-http", "--heartbeat-proc"}, nil},
		{"stallwatch record -p " + self[:1], []string{self}, nil},
		{"stallwatch jit ", []string{"inspect", "symbolize", "tomap"}, []string{"watch"}},
		{"stallwatch jit symbolize --p", []string{"--pid"}, nil},
		{"stallwatch report --format ", []string{"text", "html", "folded"}, nil},
		{"stallwatch snapshot --log-format ", []string{"text", "json"}, nil},
	}
	sc := script(t, "bash")
	for _, tc := range cases {
		got := clitest.CompleteInBash(t, sc, tc.line)
		clitest.Offers(t, "bash", tc.line, got, tc.want, tc.not)
	}
	z := clitest.NewZshSession(t, script(t, "zsh"), "stallwatch")
	lines := make([]string, len(cases))
	for i, tc := range cases {
		lines[i] = tc.line
	}
	for i, got := range z.Complete(lines...) {
		clitest.Offers(t, "zsh", cases[i].line, got, cases[i].want, cases[i].not)
	}
}

// TestManPage: the page renders without a warning, documents every flag
// of every command, and docs/stallwatch.1 is the page this table makes.
func TestManPage(t *testing.T) {
	var page, stderr bytes.Buffer
	if code := run([]string{"man"}, &page, &stderr); code != exitOK {
		t.Fatalf("man: exit %d %s", code, stderr.String())
	}
	text := clitest.RenderMan(t, page.Bytes())
	app := newApp(&globals{})
	for _, path := range leaves() {
		for _, f := range app.FlagSet(path[len(path)-1]).Flags() {
			if !strings.Contains(text, "--"+f.Name) {
				t.Errorf("the man page lacks --%s of %s", f.Name, strings.Join(names(path), " "))
			}
		}
	}
	checked, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "docs", "stallwatch.1"))
	if err != nil || !bytes.Equal(checked, page.Bytes()) {
		t.Errorf("docs/stallwatch.1 is not what 'stallwatch man' writes (%v): run 'make man'", err)
	}
}

// TestREADMECommands: the command reference (docs/commands.md) shows the
// real output of --help, the README and the pages under docs/ together
// name every flag of every command, and every page the README links to
// exists.
func TestREADMECommands(t *testing.T) {
	root := testutil.RepoRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	commands, err := os.ReadFile(filepath.Join(root, "docs", "commands.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--help"}, {"record", "--help"}} {
		var stdout, stderr bytes.Buffer
		run(args, &stdout, &stderr)
		block := "$ stallwatch " + strings.Join(args, " ") + "\n" + stdout.String() + "```"
		if !bytes.Contains(commands, []byte(block)) {
			t.Errorf("docs/commands.md does not show what 'stallwatch %s' prints now:\n%s", strings.Join(args, " "), stdout.String())
		}
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	all := slices.Clone(readme)
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	app := newApp(&globals{})
	for _, path := range leaves() {
		for _, f := range app.FlagSet(path[len(path)-1]).Flags() {
			if !regexp.MustCompile(`--` + regexp.QuoteMeta(f.Name) + `\b`).Match(all) {
				t.Errorf("neither the README nor docs/ mentions --%s (%s)", f.Name, strings.Join(names(path), " "))
			}
		}
	}
	for _, m := range regexp.MustCompile(`\]\((docs/[^)#]+)`).FindAllSubmatch(readme, -1) {
		if _, err := os.Stat(filepath.Join(root, string(m[1]))); err != nil {
			t.Errorf("the README links to %s: %v", m[1], err)
		}
	}
}

// TestShortFlags: the short forms a user tries first work in every
// command that has the flag: record -d 1s was "unknown flag -d".
func TestShortFlags(t *testing.T) {
	app := newApp(&globals{})
	want := map[string]string{"pid": "p", "duration": "d", "freq": "F", "quiet": "q", "output": "o", "config": "c"}
	for _, path := range leaves() {
		for _, f := range app.FlagSet(path[len(path)-1]).Flags() {
			if s, ok := want[f.Name]; ok && f.Short != s {
				t.Errorf("%s --%s: short form %q, want -%s", strings.Join(names(path), " "), f.Name, f.Short, s)
			}
		}
	}
	var stdout, stderr bytes.Buffer
	// A pid that cannot exist: parsed, the command fails for want of
	// the process (1), not for a flag it does not know (2).
	if code := run([]string{"record", "-d", "1s", "-F", "99", "-q", "-p", "999999999"}, &stdout, &stderr); code != exitFailure {
		t.Errorf("record -d 1s -F 99 -q -p 999999999: exit %d, want %d; stderr: %s", code, exitFailure, stderr.String())
	}
}

// TestOneJSONSpelling: output a program reads is --format json in every
// command (snapshot had --format json, jit inspect and ctl status --json).
func TestOneJSONSpelling(t *testing.T) {
	app := newApp(&globals{})
	var withJSON []string
	for _, path := range leaves() {
		fs := app.FlagSet(path[len(path)-1])
		name := strings.Join(names(path), " ")
		if fs.Lookup("json") != nil {
			t.Errorf("%s has --json; JSON output is --format json", name)
		}
		if f := fs.Lookup("format"); f != nil && slices.Contains(f.Complete.Words, "json") {
			withJSON = append(withJSON, name)
		}
	}
	for _, want := range []string{"snapshot", "jit inspect", "ctl status"} {
		if !slices.Contains(withJSON, want) {
			t.Errorf("%s has no --format json (commands with it: %v)", want, withJSON)
		}
	}
}

// TestPackageMap: docs/how-it-works.md's package map names every package
// of the module, and no package that is gone.
func TestPackageMap(t *testing.T) {
	root := testutil.RepoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "how-it-works.md"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == "deploy") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			have[filepath.ToSlash(filepath.Dir(rel))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg := range have {
		if !bytes.Contains(doc, []byte("| `"+pkg+"` |")) {
			t.Errorf("docs/how-it-works.md's package map lacks %s", pkg)
		}
	}
	for _, m := range regexp.MustCompile("(?m)^\\| [^|]*\\| `([^`]+)` \\|").FindAllSubmatch(doc, -1) {
		if !have[string(m[1])] {
			t.Errorf("docs/how-it-works.md's package map names %s, which is no package", m[1])
		}
	}
}

// TestREADMESetcap: the setcap line of README.md and docs/security.md,
// and the one the demo prints, grant what the permissions table says
// every capture may use (perms.SetcapAll): one source of truth.
func TestREADMESetcap(t *testing.T) {
	root := testutil.RepoRoot(t)
	want := perms.SetcapAll("/usr/local/bin/stallwatch")
	for _, page := range []string{"README.md", filepath.Join("docs", "security.md")} {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(strings.Split(string(b), "\n"), want) {
			t.Errorf("%s lacks the line %q", page, want)
		}
	}
	demo, err := os.ReadFile(testutil.Testdata(t, "demo", "run.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if line := strings.Replace(want, "/usr/local/bin/stallwatch", "$sw", 1); !strings.Contains(string(demo), line) {
		t.Errorf("testdata/demo/run.sh does not print %q", line)
	}
}
