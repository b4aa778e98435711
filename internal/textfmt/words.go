package textfmt

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stallwatch/stallwatch/internal/termsafe"
)

// Dur prints a duration the way a person reads it: three significant
// digits below a minute ("312ms", "4.25s"), minutes and hours above.
func Dur(d time.Duration) string {
	if d < 0 {
		if d == math.MinInt64 { // has no positive counterpart
			d++
		}
		return "-" + Dur(-d)
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

// Count prints n with thousands separators.
func Count(n int64) string {
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

// Pct prints part as a share of total, five wide ("  7.5%"), for
// columns; "  -  " when there is no total.
func Pct(part, total int64) string {
	if total <= 0 {
		return "  -  "
	}
	return fmt.Sprintf("%5.1f%%", 100*float64(part)/float64(total))
}

// Clean makes a string from the target (a thread name, a JIT's function
// name) safe to print on a terminal, on one line (package termsafe).
func Clean(s string) string { return termsafe.String(s) }

// Quoted puts a cleaned name from the target in double quotes.
func Quoted(s string) string { return `"` + Clean(s) + `"` }

// Truncate shortens s to at most n runes, marking the cut.
func Truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	if n <= 1 {
		return string(r[:n])
	}
	return string(r[:n-1]) + "…"
}

// Plural returns "1 thread", "2 threads".
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return Count(int64(n)) + " " + many
}

// Share prints a fraction as a percentage in a sentence: "62%", "7.5%"
// below a tenth, never "100%" for what falls short of it.
func Share(f float64) string {
	switch {
	case f >= 0.995 && f < 1:
		return "99%"
	case f < 0.1:
		return strconv.FormatFloat(100*f, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(100*f, 'f', 0, 64) + "%"
}

// List joins items with commas, at most max of them and how many more.
func List(items []string, max int) string {
	if len(items) <= max {
		return strings.Join(items, ", ")
	}
	return strings.Join(items[:max], ", ") + fmt.Sprintf(" and %d more", len(items)-max)
}

// Bytes prints a size in binary units: "8.0 MiB", "512 bytes".
func Bytes(b uint64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", b)
}
