package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/procwatch"
)

func TestParse(t *testing.T) {
	f, err := Parse("c.yaml", []byte(`
out: /var/lib/x
defaults:
  stall-after: 30s
rules:
  - name: julia
    match:
      cmdline: 'julia .*server\.jl'
      user: root
    heartbeat-tap: udp://:8125
    metric-tag: [env:prod, team:x]
  - name: pods
    match: {pod: 1B2C3D4E_0000_4111_8222_333344445555, container: ABC}
    heartbeat-proc: true
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Globals) != 1 || f.Globals[0].Name != "out" || f.Globals[0].Line != 2 {
		t.Errorf("globals %+v", f.Globals)
	}
	if len(f.Defaults) != 1 || f.Defaults[0].Values[0] != "30s" {
		t.Errorf("defaults %+v", f.Defaults)
	}
	if len(f.Rules) != 2 {
		t.Fatalf("rules %+v", f.Rules)
	}
	j := f.Rules[0]
	if j.Name != "julia" || j.Line != 6 || j.Select.UID != 0 || j.Select.Cmdline.String() != `julia .*server\.jl` {
		t.Errorf("rule %+v", j)
	}
	if len(j.Settings) != 2 || strings.Join(j.Settings[1].Values, ",") != "env:prod,team:x" || j.Settings[1].Line != 11 {
		t.Errorf("settings %+v", j.Settings)
	}
	p := f.Rules[1].Select
	if p.Pod != "1b2c3d4e-0000-4111-8222-333344445555" || p.Container != "abc" {
		t.Errorf("pod selector %+v", p)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ config, want string }{
		{"", "empty"},
		{"- a\n- b\n", "c.yaml:1: a configuration is a mapping"},
		{"out: x\n", "no rules"},
		{"rules:\n  - name: a\n    match: {cmdline: x}\n  - name: a\n    match: {cmdline: y}\n", `c.yaml:4: rule "a": the name is taken by the rule on line 2`},
		{"rules:\n  - match: {cmdline: x}\n", "c.yaml:2: a rule without a name"},
		{"rules:\n  - name: a\n", `c.yaml:2: rule "a" selects nothing`},
		{"rules:\n  - name: a b\n    match: {cmdline: x}\n", `c.yaml:2: name "a b"`},
		{"rules:\n  - name: a\n    match: {cmdline: x}\n    freq: 1\n    freq: 2\n", `c.yaml:5: "freq" is given twice (first on line 4)`},
		{"rules:\n  - name: a\n    match: {pod: nope}\n", `c.yaml:3: rule "a": match: pod "nope": a pod UID`},
		{"rules:\n  - name: a\n    match: {user: no-such-user-here}\n", "no such user"},
		{"rules:\n  - name: a\n    match: {pidfile: run/x.pid}\n", "an absolute path"},
		{"rules:\n  - name: a\n    match: {cmdline: x}\n    heartbeat-file: {a: b}\n", "c.yaml:4: heartbeat-file: a value or a list of values, not a mapping"},
		{"rules:\n  - name: a\n    match: {cmdline: x}\n    stall-after:\n", "c.yaml:4: stall-after: no value"},
		{"rules: [\n", "c.yaml:"},
	} {
		_, err := Parse("c.yaml", []byte(c.config))
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want a ConfigError saying %q", c.config, err, c.want)
		}
	}
}

func TestSelectorMatch(t *testing.T) {
	f, err := Parse("c.yaml", []byte(`
rules:
  - name: a
    match:
      cmdline: '^java .*Main'
      exe: '/java$'
      user: "1000"
      container: 0123
      cgroup: kubepods
`))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Rules[0].Select
	facts := procwatch.Facts{
		ID: procwatch.ID{PID: 42}, Cmdline: []string{"java", "-cp", "x", "Main"}, Exe: "/usr/lib/jvm/bin/java", UID: 1000,
		Cgroup: "/kubepods/pod/0123abcd", ContainerID: "0123abcd",
	}
	if !s.Match(&facts, 0) {
		t.Errorf("%s does not match %+v", s.String(), facts)
	}
	for name, change := range map[string]func(*procwatch.Facts){
		"user":       func(f *procwatch.Facts) { f.UID = 0 },
		"exe":        func(f *procwatch.Facts) { f.Exe = "/usr/bin/python3" },
		"no exe":     func(f *procwatch.Facts) { f.Exe = "" },
		"cmdline":    func(f *procwatch.Facts) { f.Cmdline = []string{"python", "Main"} },
		"container":  func(f *procwatch.Facts) { f.ContainerID = "ff" },
		"cgroup":     func(f *procwatch.Facts) { f.Cgroup = "/system.slice" },
		"kernel thd": func(f *procwatch.Facts) { f.Cmdline = nil },
	} {
		g := facts
		change(&g)
		if s.Match(&g, 0) {
			t.Errorf("%s: matched %+v", name, g)
		}
	}
	pf := Selector{PIDFile: "/run/x.pid"}
	if pf.Match(&facts, 41) || !pf.Match(&facts, 42) {
		t.Errorf("pidfile selector")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("rules:\n  - name: a\n    match: {cmdline: x}\n    heartbeat-proc: true\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := Parse("f.yaml", b)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("not a ConfigError: %v", err)
			}
			return
		}
		if len(file.Rules) == 0 {
			t.Fatal("parsed without rules")
		}
	})
}
