package report

import (
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stallwatch/stallwatch/internal/termsafe"
	"github.com/stallwatch/stallwatch/model"
)

// timeLayout is how reports print a moment: UTC, to the millisecond.
const timeLayout = "2006-01-02 15:04:05.000 UTC"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout)
}

// fmtDur prints a duration the way a person reads it: three significant
// digits below a minute ("312ms", "4.25s"), minutes and hours above.
func fmtDur(d time.Duration) string {
	if d < 0 {
		if d == math.MinInt64 { // has no positive counterpart
			d++
		}
		return "-" + fmtDur(-d)
	}
	switch {
	case d == 0:
		return "0s"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return trimFloat(float64(d)/1e3) + "µs"
	case d < time.Second:
		return trimFloat(float64(d)/1e6) + "ms"
	case d < time.Minute:
		return trimFloat(float64(d)/1e9) + "s"
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", d/time.Minute, (d%time.Minute)/time.Second)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", d/time.Hour, (d%time.Hour)/time.Minute)
}

// trimFloat prints v with three significant digits, no trailing zeros.
func trimFloat(v float64) string {
	prec := 0
	switch {
	case v < 10:
		prec = 2
	case v < 100:
		prec = 1
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// fmtCount prints n with thousands separators.
func fmtCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var sb strings.Builder
	if neg {
		sb.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			sb.WriteByte(',')
		}
		sb.WriteRune(c)
	}
	return sb.String()
}

func pct(part, total int64) string {
	if total <= 0 {
		return "  -  "
	}
	return fmt.Sprintf("%5.1f%%", 100*float64(part)/float64(total))
}

// clean makes a string from the target (a thread name, a JIT's function
// name) safe to print on a terminal, on one line (package termsafe).
func clean(s string) string { return termsafe.String(s) }

// quoted puts a cleaned name from the target in double quotes.
func quoted(s string) string { return `"` + clean(s) + `"` }

// truncate shortens s to at most n runes, marking the cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	if n <= 1 {
		return string(r[:n])
	}
	return string(r[:n-1]) + "…"
}

// frameText prints one line of a location: "func (file:line)".
func frameText(ln model.Line) string {
	name := ln.Function
	if name == "" {
		name = ln.SystemName
	}
	if name == "" {
		name = "?"
	}
	name = clean(name)
	if ln.File != "" && ln.Line > 0 {
		return fmt.Sprintf("%s (%s:%d)", name, clean(path.Base(ln.File)), ln.Line)
	}
	return name
}

// moduleName is the short name of where a location's code lives.
func moduleName(l *model.Location) string {
	if l.Mapping != nil && l.Mapping.File != "" {
		return clean(path.Base(l.Mapping.File))
	}
	switch l.Kind {
	case model.KindKernel:
		return "[kernel]"
	case model.KindJIT:
		return "[jit]"
	}
	return ""
}

// plural returns "1 thread", "2 threads".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmtCount(int64(n)) + " " + many
}

// systemCode says whether a function is a wrapper a person looks past to
// find the program's own code: libc and the dynamic loader, and the Go
// runtime and syscall packages.
func systemCode(module, function string) bool {
	for _, p := range []string{"libc.so", "libc-", "libpthread", "ld-linux", "ld-musl", "libc.musl"} {
		if strings.HasPrefix(module, p) {
			return true
		}
	}
	for _, p := range []string{"runtime.", "internal/runtime/", "runtime/internal/", "syscall.", "internal/syscall/",
		// cgo's thread start-up, below the Go runtime's frames
		"crosscall1", "crosscall2", "_cgo_", "x_cgo_", "threadentry",
		// an address in no mapping: a walk's end, not the program's code
		"[unknown]"} {
		if strings.HasPrefix(function, p) {
			return true
		}
	}
	return false
}

// errText is an error as a report prints it ("" for none): facts cross
// packages as errors and become text only here, at the edge.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
