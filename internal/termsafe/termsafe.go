// Package termsafe keeps what a target controls from commanding the
// terminal that shows it. Thread names, command lines, JIT symbol names
// from perf maps and jitdumps, file names: a target writes them, and a
// name holding "ESC ] 0 ; … BEL" retitles the window, "ESC [ 2 J" clears the
// screen, a carriage return overwrites the line before it, and a
// right-to-left override reorders what follows. Every text stallwatch
// prints goes through this package: String for one value placed in a
// line, Writer for a whole output.
//
// Escapes are written as Go writes them in a string literal, by number
// (\x1b, \x0a, \u202e), so that what was there can still be read. A backslash is left
// as it is: names with backslashes are common, forged escapes are
// harmless.
package termsafe

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// String returns s with every byte or character a terminal acts on
// escaped: C0 controls (newline and tab too: a value must stay on its
// line), DEL, C1 controls, the bidirectional formatting characters, and
// bytes that are not UTF-8.
func String(s string) string {
	if safe(s, false) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	appendEscaped(&b, s, false)
	return b.String()
}

// Strings applies String to each of ss, in place, and returns it.
func Strings(ss []string) []string {
	for i, s := range ss {
		ss[i] = String(s)
	}
	return ss
}

// safe reports whether s needs no escape; lines allows newlines and tabs.
func safe(s string, lines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f {
			if lines && (c == '\n' || c == '\t') {
				continue
			}
			return false
		}
		if c >= 0x80 {
			return safeRunes(s[i:])
		}
	}
	return true
}

func safeRunes(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || needsEscape(r) {
			// A real U+FFFD in the input is escaped as well; it is rare
			// and harmless either way.
			return false
		}
	}
	return true
}

// needsEscape reports whether a terminal may act on rune r.
func needsEscape(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f:
		return true
	case r >= 0x80 && r <= 0x9f: // C1: CSI (0x9b) and OSC (0x9d) of 8-bit terminals
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, // arabic letter mark, LRM, RLM
		r >= 0x202a && r <= 0x202e, // LRE, RLE, PDF, LRO, RLO
		r >= 0x2066 && r <= 0x2069: // LRI, RLI, FSI, PDI
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators: a new line to some
		return true
	}
	return false
}

func appendEscaped(b *strings.Builder, s string, lines bool) {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case lines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case needsEscape(r):
			b.WriteString(escapeRune(r))
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
}

func escapeRune(r rune) string {
	if r < 0x80 {
		return `\x` + hex2(byte(r))
	}
	q := strconv.QuoteRuneToASCII(r) // '\u202e'
	return q[1 : len(q)-1]
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}

// Writer escapes, in everything written to it, what String escapes except
// newlines and tabs: the lines of a report stay lines, and nothing in
// them acts on the terminal. A character split across two writes is
// escaped as whole.
type Writer struct {
	w       io.Writer
	json    bool   // escape as JSON does: \u009b
	pending []byte // the start of a UTF-8 sequence cut by the last write
}

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// NewJSONWriter returns a Writer for JSON text: it escapes as JSON does
// (\u009b), which only characters inside strings can need, so the JSON
// stays valid and means the same. encoding/json leaves DEL, C1 controls
// and the bidirectional characters as they are.
func NewJSONWriter(w io.Writer) *Writer { return &Writer{w: w, json: true} }

// Write implements io.Writer. It returns len(p) when everything, escaped,
// was written.
func (w *Writer) Write(p []byte) (int, error) {
	data := p
	if len(w.pending) > 0 {
		data = append(w.pending, p...)
		w.pending = nil
	}
	// Keep back an incomplete sequence at the end for the next write.
	if cut := incompleteTail(data); cut > 0 {
		w.pending = append([]byte(nil), data[len(data)-cut:]...)
		data = data[:len(data)-cut]
	}
	s := string(data)
	if safe(s, true) {
		if _, err := io.WriteString(w.w, s); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	w.escape(&b, s)
	if _, err := io.WriteString(w.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes an incomplete character left by the last write, escaped.
func (w *Writer) Flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	var b strings.Builder
	w.escape(&b, string(w.pending))
	w.pending = nil
	_, err := io.WriteString(w.w, b.String())
	return err
}

func (w *Writer) escape(b *strings.Builder, s string) {
	if !w.json {
		appendEscaped(b, s, true)
		return
	}
	for _, r := range s {
		if r != '\n' && r != '\t' && needsEscape(r) {
			fmt.Fprintf(b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r) // invalid UTF-8 becomes U+FFFD, as encoding/json does
	}
}

// incompleteTail is the length of a UTF-8 sequence begun but not finished
// at the end of p (0 when there is none).
func incompleteTail(p []byte) int {
	for n := 1; n <= 3 && n <= len(p); n++ {
		c := p[len(p)-n]
		if c < 0x80 {
			return 0
		}
		if c >= 0xc0 { // a leading byte: how long should its sequence be?
			need := 2
			switch {
			case c >= 0xf0:
				need = 4
			case c >= 0xe0:
				need = 3
			}
			if need > n {
				return n
			}
			return 0
		}
	}
	return 0
}
