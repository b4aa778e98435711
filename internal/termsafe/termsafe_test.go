package termsafe

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// attack is what an audit planted in a perf map entry: retitle the window,
// then clear the screen.
const attack = "evil\x1b]0;pwned\x07\x1b[2Jname"

func TestString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"main.work", "main.work"},
		{"JS:*fibonacci /app/fib.js:1:1", "JS:*fibonacci /app/fib.js:1:1"},
		{"héllo 世界 λ", "héllo 世界 λ"},
		{`C:\path\file`, `C:\path\file`},
		{attack, `evil\x1b]0;pwned\x07\x1b[2Jname`},
		{"two\nlines\ttab\rback", `two\x0alines\x09tab\x0dback`},
		{"line\u2028sep", `line\u2028sep`},
		{"del\x7f", `del\x7f`},
		{"c1 \u009b2J csi", `c1 \u009b2J csi`},
		{"rlo \u202egnp.exe", `rlo \u202egnp.exe`},
		{"isolate \u2066x\u2069", `isolate \u2066x\u2069`},
		{"bad \xff\xfe utf8", `bad \xff\xfe utf8`},
		{"cut \xe4\xb8", `cut \xe4\xb8`},
		{"", ""},
	}
	for _, tc := range tests {
		if got := String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// noControls fails when s holds anything a terminal acts on but newlines
// and tabs.
func noControls(t *testing.T, s string) {
	t.Helper()
	for i, r := range s {
		if r == '\n' || r == '\t' {
			continue
		}
		if needsEscape(r) || (r == utf8.RuneError) {
			t.Errorf("output keeps %U at byte %d: %q", r, i, s)
		}
	}
}

func TestWriterKeepsLines(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	report := "Threads\n  1\t" + attack + "\n  2\tok\n"
	if _, err := w.Write([]byte(report)); err != nil {
		t.Fatal(err)
	}
	want := "Threads\n  1\t" + `evil\x1b]0;pwned\x07\x1b[2Jname` + "\n  2\tok\n"
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
	noControls(t, out.String())
}

func TestWriterSplitCharacters(t *testing.T) {
	// A character cut between two writes is neither escaped as garbage
	// nor lost; a C1 control cut between writes is still escaped.
	in := "世界 \u009b2J λ"
	for cut := 0; cut <= len(in); cut++ {
		var out bytes.Buffer
		w := NewWriter(&out)
		w.Write([]byte(in[:cut]))
		w.Write([]byte(in[cut:]))
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if want := `世界 \u009b2J λ`; out.String() != want {
			t.Errorf("cut at %d: %q, want %q", cut, out.String(), want)
		}
	}
	var out bytes.Buffer
	w := NewWriter(&out)
	w.Write([]byte("end \xe4"))
	w.Flush()
	if out.String() != `end \xe4` {
		t.Errorf("an incomplete character at the end: %q", out.String())
	}
}

func TestJSONWriterStaysValidJSON(t *testing.T) {
	names := []string{attack, "c1 \u009b2J", "rlo \u202e", "del \x7f", "plain"}
	var raw bytes.Buffer
	if err := json.NewEncoder(&raw).Encode(map[string]any{"names": names}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := NewJSONWriter(&out)
	w.Write(raw.Bytes())
	noControls(t, out.String())
	var back map[string][]string
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatalf("escaped JSON does not parse: %v\n%s", err, out.String())
	}
	if strings.Join(back["names"], "|") != strings.Join(names, "|") {
		t.Errorf("escaped JSON means %q, want %q", back["names"], names)
	}
}
