package daemon

import (
	"regexp"
	"testing"

	"github.com/stallwatch/stallwatch/internal/procwatch"
)

func TestWrapperOf(t *testing.T) {
	for _, tc := range []struct {
		exe  string
		args []string
		want string
	}{
		{"/usr/bin/timeout", []string{"timeout", "90", "./progs/deadlock"}, "timeout"},
		{"/usr/bin/sudo", []string{"sudo", "-u", "app", "./server"}, "sudo"},
		{"/usr/bin/env", []string{"env", "A=1", "julia", "server.jl"}, "env"},
		{"/usr/bin/dash", []string{"sh", "-c", "./server --port 80"}, "sh -c"},
		{"/usr/bin/bash", []string{"bash", "-ec", "./server"}, "bash -c"},
		{"/usr/bin/busybox", []string{"nohup", "./server"}, "nohup"}, // a busybox applet: its argv[0]
		{"/usr/bin/bash", []string{"bash", "./server.sh"}, ""},       // a script is the program
		{"/usr/bin/bash", []string{"bash", "--norc", "./x.sh", "-c"}, ""},
		{"/usr/bin/python3.11", []string{"python3", "-c", "import x"}, ""},
		{"/opt/julia/bin/julia", []string{"julia", "--project", "server.jl"}, ""},
		{"", nil, ""},
	} {
		f := &procwatch.Facts{Exe: tc.exe, Cmdline: tc.args}
		if got := WrapperOf(f); got != tc.want {
			t.Errorf("WrapperOf(%s %q) = %q, want %q", tc.exe, tc.args, got, tc.want)
		}
	}
}

// A cmdline: never selects a wrapper whose arguments match; an exe: that
// names the wrapper does.
func TestCmdlinePassesOverWrappers(t *testing.T) {
	timeout := &procwatch.Facts{Exe: "/usr/bin/timeout", Cmdline: []string{"timeout", "90", "./deadlock", "--x"}}
	prog := &procwatch.Facts{Exe: "/work/deadlock", Cmdline: []string{"./deadlock", "--x"}}
	byCmdline := &Selector{Cmdline: regexp.MustCompile(`deadlock --x`)}
	if byCmdline.Match(timeout, 0) || !byCmdline.Match(prog, 0) {
		t.Errorf("cmdline: selects timeout %v, the program %v; want false, true", byCmdline.Match(timeout, 0), byCmdline.Match(prog, 0))
	}
	byExe := &Selector{Cmdline: regexp.MustCompile(`deadlock`), Exe: regexp.MustCompile(`/timeout$`)}
	if !byExe.Match(timeout, 0) {
		t.Error("exe: naming timeout does not select it")
	}
}
