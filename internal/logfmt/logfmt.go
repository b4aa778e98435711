// Package logfmt makes the loggers stallwatch's commands write to standard
// error, in the format --log-format names:
//
//   - json: one JSON object a line, for journald, Kubernetes and log
//     shippers; durations are strings ("1.5s"), as people read them, not
//     nanoseconds.
//   - text: key=value lines (slog's text format), for a long-running
//     command such as watch.
//   - plain: for a command a person runs and reads (record, snapshot, jit):
//     the message, then its attributes.
//
// Every format escapes what the target controls (package termsafe): a
// thread or JIT symbol name cannot command the terminal a log is read on.
package logfmt

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/internal/termsafe"
)

// Formats are the names --log-format accepts.
var Formats = []string{"text", "json"}

// Valid reports whether format is one of Formats.
func Valid(format string) bool { return format == "text" || format == "json" }

// Options are a logger's settings.
type Options struct {
	// Format is "text" or "json".
	Format string
	// Plain writes text as "PREFIX: message key=value" lines instead of
	// slog's key=value lines.
	Plain  bool
	Prefix string
	Level  slog.Leveler // default Info
}

// New returns a logger writing to w.
func New(w io.Writer, o Options) *slog.Logger {
	lvl := o.Level
	if lvl == nil {
		lvl = slog.LevelInfo
	}
	switch {
	case o.Format == "json":
		// slog escapes C0 controls as JSON does (\n, \u001b); the
		// writer adds what encoding/json leaves as it is (DEL, C1
		// controls, bidirectional characters), so every string keeps
		// its text whole when decoded and none acts on a terminal.
		return slog.New(slog.NewJSONHandler(termsafe.NewJSONWriter(w), &slog.HandlerOptions{Level: lvl, ReplaceAttr: jsonAttr}))
	case o.Plain:
		return slog.New(&plainHandler{w: w, prefix: o.Prefix, level: lvl, mu: new(sync.Mutex)})
	}
	// slog's text handler quotes every value holding a control character
	// or a non-printing one (strconv.Quote): nothing to add but the
	// durations' rounding it already does.
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl}))
}

// jsonAttr writes durations and other Stringers as strings ("1.5s"), as
// people read them. Strings are left as they are: escaping is JSON's own
// (a newline is \n), done by slog and the writer New wraps.
func jsonAttr(groups []string, a slog.Attr) slog.Attr {
	switch v := a.Value; v.Kind() {
	case slog.KindDuration:
		a.Value = slog.StringValue(v.Duration().String())
	case slog.KindAny:
		if _, isErr := v.Any().(error); isErr {
			break // slog writes its Error()
		}
		if x, ok := v.Any().(fmt.Stringer); ok {
			a.Value = slog.StringValue(x.String())
		}
	}
	return a
}

// plainHandler writes "prefix: message key=value ..." lines.
type plainHandler struct {
	w      io.Writer
	prefix string
	level  slog.Leveler
	attrs  []slog.Attr
	group  string
	mu     *sync.Mutex
}

func (h *plainHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *plainHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	if h.prefix != "" {
		b.WriteString(h.prefix + ": ")
	}
	if r.Level >= slog.LevelWarn {
		b.WriteString(strings.ToLower(r.Level.String()) + ": ")
	}
	b.WriteString(termsafe.String(r.Message))
	for _, a := range h.attrs {
		writeAttr(&b, "", a) // their keys hold their groups
	}
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.group, a)
		return true
	})
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func writeAttr(b *strings.Builder, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		for _, g := range a.Value.Group() {
			writeAttr(b, join(group, a.Key), g)
		}
		return
	}
	var s string
	switch a.Value.Kind() {
	case slog.KindDuration:
		s = round(a.Value.Duration()).String()
	case slog.KindTime:
		s = a.Value.Time().Format("15:04:05.000")
	default:
		s = a.Value.String()
	}
	s = termsafe.String(s)
	if s == "" || strings.ContainsAny(s, " =\"") {
		s = fmt.Sprintf("%q", s)
	}
	b.WriteString(" " + join(group, a.Key) + "=" + s)
}

func join(group, key string) string {
	if group == "" {
		return key
	}
	return group + "." + key
}

func round(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}

func (h *plainHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h2 := *h
	h2.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range as {
		a.Key = join(h.group, a.Key)
		h2.attrs = append(h2.attrs, a)
	}
	return &h2
}

func (h *plainHandler) WithGroup(name string) slog.Handler {
	h2 := *h
	h2.group = join(h.group, name)
	return &h2
}
