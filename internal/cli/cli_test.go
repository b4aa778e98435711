package cli

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// testApp is a small program with the shapes the real table has: a
// command with grouped flags, one with subcommands, and the built-ins.
type testApp struct {
	app *App
	// What the last run of "run" saw.
	pid     int
	out     string
	every   time.Duration
	tags    []string
	quiet   bool
	format  string
	logFmt  string
	inv     *Invocation
	changed map[string]bool
}

func newTestApp() *testApp {
	ta := &testApp{}
	app := &App{
		Name:    "prog",
		Summary: "a program for tests",
		Help:    "Prog does things.",
		Footer:  "Exit codes: 0 done.",
		Version: func() string { return "1.2.3" },
		Global: func(fs *FlagSet) {
			fs.Choice(&ta.logFmt, "log-format", "text", []string{"text", "json"}, "log as `FORMAT`")
		},
	}
	run := &Command{
		Name:    "run",
		Summary: "run something",
		Usage:   "-p PID [flags] [-- CMD]",
		Help:    "Runs something.\n\nExample:\n  prog run -p 1",
		Flags: func(fs *FlagSet) {
			fs.Int(&ta.pid, "pid", 0, "the process").Completes(PID).Arg = "PID"
			fs.Bool(&ta.quiet, "quiet", "say less")
			fs.Group("Output")
			fs.String(&ta.out, "out", "./out", "write under `DIR`").Completes(Dir)
			fs.Duration(&ta.every, "every", 5*time.Minute, "how often")
			fs.Strings(&ta.tags, "tag", "a tag `K:V`")
			fs.Choice(&ta.format, "format", "text", []string{"text", "json"}, "print as `FORMAT`")
		},
		Args: Program,
		Run: func(ctx context.Context, inv *Invocation) error {
			ta.inv = inv
			ta.changed = map[string]bool{}
			for _, f := range inv.Flags.Flags() {
				ta.changed[f.Name] = inv.Flags.Changed(f.Name)
			}
			if ta.pid == 13 {
				return errors.New("unlucky")
			}
			return nil
		},
	}
	sub := &Command{
		Name:    "file",
		Summary: "work on files",
		Commands: []*Command{{
			Name: "show", Summary: "show a file", Usage: "FILE", Args: File,
			Run: func(ctx context.Context, inv *Invocation) error { ta.inv = inv; return nil },
		}},
	}
	app.Commands = []*Command{run, sub, app.CompletionCommand(), app.ManCommand(), app.HelpCommand(), app.VersionCommand()}
	ta.app = app
	return ta
}

func (ta *testApp) run(args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	err = ta.app.Run(context.Background(), args, &o, &e)
	return o.String(), e.String(), err
}

func TestParse(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		pid   int
		out   string
		every time.Duration
		tags  []string
		quiet bool
		pos   []string
		rest  []string
	}{
		{"defaults", nil, 0, "./out", 5 * time.Minute, nil, false, nil, nil},
		{"long with space", []string{"--pid", "42"}, 42, "./out", 5 * time.Minute, nil, false, nil, nil},
		{"long with =", []string{"--pid=42", "--out=/x"}, 42, "/x", 5 * time.Minute, nil, false, nil, nil},
		{"short", []string{"-p", "42", "-q"}, 42, "./out", 5 * time.Minute, nil, true, nil, nil},
		{"one dash long, as package flag writes it", []string{"-pid", "7", "-quiet"}, 7, "./out", 5 * time.Minute, nil, true, nil, nil},
		{"bool with value", []string{"--quiet=false"}, 0, "./out", 5 * time.Minute, nil, false, nil, nil},
		{"repeatable", []string{"--tag", "a:1", "--tag=b:2"}, 0, "./out", 5 * time.Minute, []string{"a:1", "b:2"}, false, nil, nil},
		{"duration", []string{"--every", "90s"}, 0, "./out", 90 * time.Second, nil, false, nil, nil},
		{"flags after arguments", []string{"x", "--pid", "3", "y"}, 3, "./out", 5 * time.Minute, nil, false, []string{"x", "y"}, nil},
		{"-- ends flags", []string{"-p", "3", "--", "sleep", "--pid", "9"}, 3, "./out", 5 * time.Minute, nil, false, nil, []string{"sleep", "--pid", "9"}},
		{"negative value", []string{"--pid", "-3"}, -3, "./out", 5 * time.Minute, nil, false, nil, nil},
		{"a lone dash is an argument", []string{"-"}, 0, "./out", 5 * time.Minute, nil, false, []string{"-"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ta := newTestApp()
			if _, stderr, err := ta.run(append([]string{"run"}, tc.args...)...); err != nil {
				t.Fatalf("%v; stderr %s", err, stderr)
			}
			if ta.pid != tc.pid || ta.out != tc.out || ta.every != tc.every || !reflect.DeepEqual(ta.tags, tc.tags) || ta.quiet != tc.quiet {
				t.Errorf("pid %d out %q every %v tags %q quiet %v", ta.pid, ta.out, ta.every, ta.tags, ta.quiet)
			}
			if !reflect.DeepEqual(ta.inv.Args, tc.pos) || !reflect.DeepEqual(ta.inv.Rest, tc.rest) {
				t.Errorf("args %q rest %q, want %q %q", ta.inv.Args, ta.inv.Rest, tc.pos, tc.rest)
			}
		})
	}
}

func TestChanged(t *testing.T) {
	ta := newTestApp()
	if _, _, err := ta.run("run", "-p", "1", "--out", "./out"); err != nil {
		t.Fatal(err)
	}
	if !ta.changed["pid"] || !ta.changed["out"] || ta.changed["every"] {
		t.Errorf("changed %v: want pid and out (given, even at its default), not every", ta.changed)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--pdi", "1"}, "prog run: unknown flag --pdi (did you mean --pid?)"},
		{[]string{"run", "--qu"}, "unknown flag --qu (did you mean --quiet?)"},
		{[]string{"run", "--p", "1"}, "unknown flag --p"},
		{[]string{"run", "--pid"}, "prog run: --pid needs a value (PID)"},
		{[]string{"run", "--pid", "x"}, `--pid "x": not a whole number`},
		{[]string{"run", "--every", "5"}, `--every "5": not a duration`},
		{[]string{"run", "--format", "xml"}, `--format "xml": want text or json`},
		{[]string{"run", "--log-format", "xml"}, `--log-format "xml": want text or json`},
		{[]string{"rnu"}, `prog: unknown command "rnu" (did you mean "run"?)`},
		{[]string{"--pid", "3"}, "prog: unknown flag --pid: a command comes first"},
		{[]string{"file"}, "prog file: a command is needed: show"},
		{[]string{"file", "cat"}, `prog file: unknown command "cat"`},
		{[]string{"help", "nope"}, `prog help: unknown command "nope"`},
		{[]string{"completion", "fish"}, `no completion for "fish"`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, _, err := newTestApp().run(tc.args...)
			var ue UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("err %v (%T), want a UsageError", err, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q does not say %q", err, tc.want)
			}
			if stdout != "" {
				t.Errorf("a usage error printed on stdout: %q", stdout)
			}
			var buf bytes.Buffer
			WriteError(&buf, err)
			if !strings.HasSuffix(buf.String(), "--help' for usage.\n") {
				t.Errorf("the error does not point at the help: %q", buf.String())
			}
		})
	}
}

func TestNoCommand(t *testing.T) {
	stdout, stderr, err := newTestApp().run()
	var ue UsageError
	if !errors.As(err, &ue) || stdout != "" || !strings.Contains(stderr, "Usage:\n  prog COMMAND") {
		t.Errorf("err %v, stdout %q, stderr %q: want the usage on stderr and a usage error", err, stdout, stderr)
	}
	var buf bytes.Buffer
	WriteError(&buf, err)
	if buf.Len() != 0 {
		t.Errorf("the usage shown is followed by %q", buf.String())
	}
}

func TestFailureIsNotUsage(t *testing.T) {
	_, _, err := newTestApp().run("run", "-p", "13")
	var ce *CommandError
	if !errors.As(err, &ce) || ce.Path != "prog run" || err.Error() != "prog run: unlucky" {
		t.Errorf("err %v", err)
	}
	if errors.As(err, new(UsageError)) {
		t.Error("a failure is a usage error")
	}
}

func TestHelpGoesToStdout(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"help"},
		{"run", "--help"}, {"run", "-h"}, {"run", "-p", "3", "--help"}, {"help", "run"},
		{"file", "--help"}, {"help", "file"}, {"file", "help"}, {"help", "file", "show"}, {"file", "show", "-h"},
	} {
		stdout, stderr, err := newTestApp().run(args...)
		if err != nil || stderr != "" || !strings.HasPrefix(stdout, "Usage") && !strings.HasPrefix(stdout, "Prog does things") {
			t.Errorf("%q: err %v, stderr %q, stdout %q", args, err, stderr, stdout)
		}
	}
}

func TestCommandHelp(t *testing.T) {
	help, _, _ := newTestApp().run("run", "--help")
	want := `Usage: prog run -p PID [flags] [-- CMD]

Runs something.

Example:
  prog run -p 1

Flags:
  -p, --pid PID            the process
  -q, --quiet              say less

Output flags:
      --out DIR            write under DIR (default ./out)
      --every DUR          how often (default 5m)
      --tag K:V            a tag K:V (repeatable)
      --format FORMAT      print as FORMAT (default text)

Common flags:
      --log-format FORMAT  log as FORMAT (default text)
  -h, --help               show this help
`
	if help != want {
		t.Errorf("help:\n%s\nwant:\n%s", help, want)
	}
	top, _, _ := newTestApp().run("--help")
	for _, w := range []string{"Prog does things.", "  run         run something", "  file        work on files", "Exit codes: 0 done.", "prog help COMMAND"} {
		if !strings.Contains(top, w) {
			t.Errorf("top-level help lacks %q:\n%s", w, top)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"-v"}, {"version"}} {
		stdout, stderr, err := newTestApp().run(args...)
		if err != nil || stdout != "prog 1.2.3\n" || stderr != "" {
			t.Errorf("%q: err %v stdout %q stderr %q", args, err, stdout, stderr)
		}
	}
}

func TestWrap(t *testing.T) {
	var b strings.Builder
	writeColumns(&b, "  --x", strings.Repeat("word ", 30), 10)
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		if len(line) > helpWidth {
			t.Errorf("line of %d > %d: %q", len(line), helpWidth, line)
		}
		if !strings.HasPrefix(line, "  --x") && !strings.HasPrefix(line, "          word") {
			t.Errorf("line not aligned: %q", line)
		}
	}
}

// TestShortNames: a letter names one flag, and never -h or -v, which are
// help and version in every command.
func TestShortNames(t *testing.T) {
	seen := map[string]string{}
	for long, short := range shortNames {
		if len(short) != 1 || short == "h" || short == "v" {
			t.Errorf("--%s: short form -%s is not one free letter", long, short)
		}
		if other, dup := seen[short]; dup {
			t.Errorf("-%s is both --%s and --%s", short, long, other)
		}
		seen[short] = long
	}
	fs := NewFlagSet()
	var d time.Duration
	fs.Duration(&d, "duration", time.Second, "how long")
	if _, err := fs.parse([]string{"-d", "1500ms"}); err != nil || d != 1500*time.Millisecond {
		t.Errorf("-d 1500ms: %v, %v", d, err)
	}
}
