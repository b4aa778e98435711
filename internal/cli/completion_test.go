package cli

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/cli/clitest"
)

func script(t *testing.T, shell string) []byte {
	t.Helper()
	out, stderr, err := newTestApp().run("completion", shell)
	if err != nil {
		t.Fatalf("completion %s: %v %s", shell, err, stderr)
	}
	return []byte(out)
}

// completionCases are lines and what their completion must offer (all of
// want) and must not (none of not).
var completionCases = []struct {
	line      string
	want, not []string
}{
	{"prog ", []string{"run", "file", "completion", "help"}, []string{"show"}},
	{"prog r", []string{"run"}, []string{"file"}},
	{"prog run --ou", []string{"--out"}, []string{"--pid"}},
	{"prog run -p 3 --fo", []string{"--format"}, nil},
	{"prog run --log", []string{"--log-format"}, nil},
	{"prog run --format ", []string{"text", "json"}, []string{"--out"}},
	{"prog run --every 5m --format j", []string{"json"}, []string{"text"}},
	{"prog file ", []string{"show"}, []string{"run"}},
	{"prog help ", []string{"run", "file"}, nil},
	{"prog completion ", []string{"bash", "zsh"}, nil},
}

func TestBashCompletion(t *testing.T) {
	sc := script(t, "bash")
	for _, tc := range completionCases {
		clitest.Offers(t, "bash", tc.line, clitest.CompleteInBash(t, sc, tc.line), tc.want, tc.not)
	}
	// --flag=value: bash splits the word at '='.
	clitest.Offers(t, "bash", "prog run --format=j", completeBashWords(t, sc, "prog", "run", "--format", "=", "j"), []string{"json"}, nil)
	// A pid: the test's own is running.
	self := strconv.Itoa(os.Getpid())
	clitest.Offers(t, "bash", "prog run -p", clitest.CompleteInBash(t, sc, "prog run -p "+self[:1]), []string{self}, nil)
	// A directory for --out, a file for show.
	clitest.Offers(t, "bash", "prog run --out /pro", clitest.CompleteInBash(t, sc, "prog run --out /pro"), []string{"/proc"}, []string{"/proc/cpuinfo"})
	clitest.Offers(t, "bash", "prog file show /etc/hostn", clitest.CompleteInBash(t, sc, "prog file show /etc/hostn"), []string{"/etc/hostname"}, nil)
	// After "--", a program.
	clitest.Offers(t, "bash", "prog run -- ba", clitest.CompleteInBash(t, sc, "prog run -- ba"), []string{"bash"}, nil)
}

// completeBashWords completes with COMP_WORDS given as bash would split
// them.
func completeBashWords(t *testing.T, sc []byte, words ...string) []string {
	t.Helper()
	return clitest.CompleteInBash(t, sc, strings.Join(words, " "))
}

func TestZshCompletion(t *testing.T) {
	z := clitest.NewZshSession(t, script(t, "zsh"), "prog")
	self := strconv.Itoa(os.Getpid())
	cases := append(completionCases[:len(completionCases):len(completionCases)], []struct {
		line      string
		want, not []string
	}{
		{"prog run -p ", []string{self}, nil},
		{"prog run --pid=", []string{self}, nil},
		{"prog run --out /pro", []string{"proc"}, []string{"cpuinfo"}},
		{"prog run -- ba", []string{"bash"}, nil},
		{"prog file show /etc/hostn", []string{"hostname"}, nil},
	}...)
	lines := make([]string, len(cases))
	for i, tc := range cases {
		lines[i] = tc.line
	}
	got := z.Complete(lines...)
	for i, tc := range cases {
		clitest.Offers(t, "zsh", tc.line, got[i], tc.want, tc.not)
	}
}
