package logfmt

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

const evil = "evil\x1b]0;pwned\x07\x1b[2J\u009b\u202ename"

func TestJSONDurationsAreStrings(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, Options{Format: "json"})
	log.Info("heartbeat recovered", "stall", 1500*time.Millisecond, "took", 3*time.Second)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if rec["stall"] != "1.5s" || rec["took"] != "3s" {
		t.Errorf("durations %v, %v; want \"1.5s\", \"3s\": %s", rec["stall"], rec["took"], buf.String())
	}
}

func TestEveryFormatEscapesTheTarget(t *testing.T) {
	for _, o := range []Options{{Format: "json"}, {Format: "text"}, {Format: "text", Plain: true, Prefix: "stallwatch x"}} {
		var buf bytes.Buffer
		log := New(&buf, o).With("comm", evil)
		log.Warn(evil, "name", evil, "err", errors.New(evil), "names", []string{evil})
		out := buf.String()
		if strings.ContainsAny(out, "\x1b\x07\u009b\u202e") {
			t.Errorf("%+v: output keeps a control character: %q", o, out)
		}
		if !strings.Contains(out, "pwned") {
			t.Errorf("%+v: the name was lost: %q", o, out)
		}
		if o.Format == "json" {
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Errorf("json: %v: %s", err, out)
			}
		}
	}
}

func TestPlain(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, Options{Format: "text", Plain: true, Prefix: "stallwatch record", Level: slog.LevelInfo})
	log.With("pid", 42).WithGroup("g").Info("recording", "for", 10*time.Second, "note", "two words")
	log.Debug("hidden")
	log.Warn("careful")
	want := "stallwatch record: recording pid=42 g.for=10s g.note=\"two words\"\nstallwatch record: warn: careful\n"
	if buf.String() != want {
		t.Errorf("got %q, want %q", buf.String(), want)
	}
}

// A newline in a message or a value is JSON's \n: decoded, the text is
// whole (it was \x0a, which a log shipper shows as four characters).
func TestJSONKeepsNewlines(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, Options{Format: "json"})
	log.Info("two\nlines", "detail", "a\nb\tc", "err", errors.New("x\ny"), "names", []string{"p\nq"})
	out := buf.String()
	if strings.Count(out, "\n") != 1 || strings.Contains(out, `\x0a`) {
		t.Errorf("not one line with JSON escapes: %q", out)
	}
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for k, want := range map[string]any{"msg": "two\nlines", "detail": "a\nb\tc", "err": "x\ny"} {
		if rec[k] != want {
			t.Errorf("%s = %q, want %q", k, rec[k], want)
		}
	}
	if names, _ := rec["names"].([]any); len(names) != 1 || names[0] != "p\nq" {
		t.Errorf("names = %#v, want [\"p\\nq\"]", rec["names"])
	}
}
