package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestParseHostile: configurations built to exhaust a YAML reader are
// refused at once, with their file and line: a billion laughs (aliases
// nine deep), a merge key, 10,000 levels of nesting, a file over 1 MiB.
func TestParseHostile(t *testing.T) {
	laughs := "defaults:\n  tags: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\nrules:\n"
	laughs += "  - name: x\n    match: {cmdline: x}\n    heartbeat-proc: true\n    tags: [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
	for _, c := range []struct{ name, config, want string }{
		{"billion laughs", laughs, "c.yaml:7: tags: "},
		{"merge key", "defaults: &d {stall-after: 3s}\nrules:\n  - name: x\n    match: {cmdline: x}\n    heartbeat-proc: true\n    <<: *d\n", "<<: "},
		{"10,000 levels", "rules:\n  - name: x\n    match: {cmdline: x}\n    tags: " + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + "\n", "c.yaml:"},
	} {
		start := time.Now()
		_, err := Parse("c.yaml", []byte(c.config))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s: refused after %v", c.name, d)
		}
	}
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte("rules: []\n"+strings.Repeat("# padding\n", MaxConfigBytes/10+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(big); err == nil || !strings.Contains(err.Error(), big) {
		t.Errorf("a file over %d bytes: %v, want refused naming it", MaxConfigBytes, err)
	}
}
