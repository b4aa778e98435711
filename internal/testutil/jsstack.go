package testutil

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// JSFrame is one frame of a JavaScript stack trace (Error.stack): the
// name the trace gives the frame, its script, line and column ("" and 0
// for a builtin).
type JSFrame struct {
	Name         string
	Script       string
	Line, Column int
}

var (
	jsStackLine   = regexp.MustCompile(`^\s+at (?:(.*) \()?(.*):(\d+):(\d+)\)?$`)
	jsBuiltinLine = regexp.MustCompile(`^\s+at (.*) \(<anonymous>\)$`)
)

// ReadErrorStack parses the Error.stack a target wrote to path: "    at
// name (file:line:col)", "    at file:line:col" for an anonymous
// function, "    at name (<anonymous>)" for a builtin.
func ReadErrorStack(t testing.TB, path string) []JSFrame {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []JSFrame
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n")[1:] {
		if m := jsBuiltinLine.FindStringSubmatch(line); m != nil {
			out = append(out, JSFrame{Name: m[1]})
			continue
		}
		m := jsStackLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("%s: stack line %q", path, line)
		}
		l, _ := strconv.Atoi(m[3])
		c, _ := strconv.Atoi(m[4])
		out = append(out, JSFrame{Name: m[1], Script: m[2], Line: l, Column: c})
	}
	return out
}

// SameJSName compares a function's debug name (V8's: its name, else the
// one V8 inferred; "" for an anonymous function) with how a stack trace
// names its frame: the trace puts a method call's receiver type before
// the name ("Module._load") and the alias after it ("[as runMain]"), and
// "new " before a constructor's.
func SameJSName(name, trace string) bool {
	trace, _, _ = strings.Cut(trace, " [as ")
	trace = strings.TrimPrefix(trace, "new ")
	switch {
	case name == trace:
		return true
	case name == "" || name == "(anonymous)":
		return trace == "" || strings.HasSuffix(trace, ".<anonymous>")
	}
	return strings.HasSuffix(trace, "."+name)
}
