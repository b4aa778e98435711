package daemon

import (
	"regexp"
	"testing"
	"time"
)

func TestCmdlineNeed(t *testing.T) {
	for _, c := range []struct {
		pattern string
		want    int
	}{
		{`^myapp-server`, len("myapp-server")},
		{`\Ajava -jar app\.jar`, len("java -jar app.jar")},
		{`^(api|worker)-[0-9]{1,3}`, len("worker-") + 3*4},
		{`^myapp-server .*`, maxCmdline},
		{`julia .*server\.jl`, maxCmdline},
		{`myapp-server`, maxCmdline},
		{`^a|b`, maxCmdline},
		{`(?i)^svc`, 3 + 3*4},
	} {
		if got := cmdlineNeed([]*regexp.Regexp{regexp.MustCompile(c.pattern)}); got != c.want {
			t.Errorf("%q: need %d bytes, want %d", c.pattern, got, c.want)
		}
	}
	two := []*regexp.Regexp{regexp.MustCompile(`^ab`), regexp.MustCompile(`^abcd`)}
	if got := cmdlineNeed(two); got != 4 {
		t.Errorf("two patterns: %d, want the larger need, 4", got)
	}
}

// TestCmdlineNeedDecides: a command line cut at a pattern's need is
// matched as the whole one is.
func TestCmdlineNeedDecides(t *testing.T) {
	lines := []string{"myapp-server --port 8080", "myapp-serve", "xmyapp-server", "worker-12 run", "api-7", "api-x"}
	for _, p := range []string{`^myapp-server`, `^(api|worker)-[0-9]{1,3}`, `^myapp-server( |$)`} {
		re := regexp.MustCompile(p)
		n := patternNeed(re)
		for _, l := range lines {
			cut := l
			if len(cut) > n {
				cut = cut[:n]
			}
			if re.MatchString(cut) != re.MatchString(l) {
				t.Errorf("%q on %q cut to %d bytes (%q): %v, whole %v", p, l, n, cut, re.MatchString(cut), re.MatchString(l))
			}
		}
	}
}

func TestExecBudget(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name  string
		bytes int // each exec reads
		want  int // taken in a second
	}{
		{"4 KiB command lines: the bytes' bound", 4096, execBytesPerSecond / 4096},
		{"short command lines: the count's bound", 22, execsPerSecond},
		// Before, each exec was charged the unanchored pattern's need
		// (128 KiB) whatever it read: 32 a second.
		{"short lines under an unanchored pattern", 60, execsPerSecond},
		{"one exec over the bytes' bound alone is still looked at", 8 << 20, 1},
	}
	for _, tc := range tests {
		var b execBudget
		took := 0
		for range 10_000 {
			if b.take(now) {
				b.charge(tc.bytes)
				took++
			}
		}
		if took != tc.want {
			t.Errorf("%s: %d of 10,000 taken in a second, want %d", tc.name, took, tc.want)
		}
		if b.over != uint64(10_000-took) {
			t.Errorf("%s: over %d, want %d", tc.name, b.over, 10_000-took)
		}
		if !b.take(now.Add(time.Second)) {
			t.Errorf("%s: nothing taken in the next second", tc.name)
		}
	}
}
