package cli

import (
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/cli/clitest"
)

func TestManPage(t *testing.T) {
	page, _, err := newTestApp().run("man")
	if err != nil {
		t.Fatal(err)
	}
	text := clitest.RenderMan(t, []byte(page))
	for _, want := range []string{
		"PROG(1)", "prog - a program for tests", "prog run -p PID [flags] [-- CMD]", "prog file show FILE",
		"-p, --pid PID", "--out DIR", "write under DIR (default ./out)", "--tag K:V", "(repeatable)",
		"Output flags:", "--log-format FORMAT", "prog run -p 1", "Runs something.",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the man page lacks %q:\n%s", want, text)
		}
	}
}

func TestRoffEscapes(t *testing.T) {
	for in, want := range map[string]string{
		`a\b`:        `a\eb`,
		"--pid":      `\-\-pid`,
		"a ← b — c":  `a \[u2190] b \[u2014] c`,
		".TH evil":   `\&.TH evil`,
		"'quote":     `\&'quote`,
		"plain text": "plain text",
	} {
		if got := roffLine(in); got != want {
			t.Errorf("roffLine(%q) = %q, want %q", in, got, want)
		}
	}
}
