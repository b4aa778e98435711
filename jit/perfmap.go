package jit

import (
	"bytes"
	"fmt"
	"github.com/stallwatch/stallwatch/internal/hexnum"
	"io"
)

// mapReader reads the lines of one perf map ("START SIZE name", hex
// numbers with or without 0x) and remembers where it stopped. Only lines
// that end in a newline are read while the file may grow; final mode
// takes a last line without one.
type mapReader struct {
	name  string
	off   int64 // offset of the next line
	line  int   // lines read
	lines int   // valid lines
	bad   int   // malformed lines skipped
	empty int   // blank lines

	buf      []byte
	problems []*FormatError
	// skipping is set while the rest of an overlong line is skipped.
	skipping bool
	partial  *FormatError
}

func newMapReader(name string) *mapReader { return &mapReader{name: name} }

func (m *mapReader) problem(off int64, line int, format string, args ...any) {
	if len(m.problems) < maxProblems {
		m.problems = append(m.problems, &FormatError{File: m.name, Offset: off, Line: line, Reason: fmt.Sprintf(format, args...)})
	}
}

// read parses the complete lines between the last read and size and calls
// visit for each valid one; name points into a buffer reused afterwards.
func (m *mapReader) read(r io.ReaderAt, size int64, final bool, visit func(start, size uint64, name []byte)) error {
	m.partial = nil
	for m.off < size {
		n := int(min(max(size-m.off, minBuf), maxBuf))
		if len(m.buf) < n {
			m.buf = make([]byte, n)
		}
		n = int(min(int64(len(m.buf)), size-m.off))
		got, err := r.ReadAt(m.buf[:n], m.off)
		if got < n {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read %s at offset %d: %w", m.name, m.off, err)
		}
		chunk := m.buf[:n]
		atEOF := m.off+int64(n) == size
		consumed := 0
	lines:
		for consumed < len(chunk) {
			rest := chunk[consumed:]
			nl := bytes.IndexByte(rest, '\n')
			if nl < 0 {
				switch {
				case len(rest) == len(m.buf) || m.skipping:
					// A line longer than the buffer: skip it.
					if !m.skipping {
						m.line++
						m.bad++
						m.problem(m.off+int64(consumed), m.line, "line longer than %d bytes", maxBuf)
						m.skipping = true
					}
					consumed = len(chunk)
				case atEOF && final:
					m.parseLine(m.off+int64(consumed), rest, visit)
					consumed = len(chunk)
				case atEOF:
					m.partial = &FormatError{File: m.name, Offset: m.off + int64(consumed), Line: m.line + 1, Reason: fmt.Sprintf("last line incomplete (%d bytes, no newline yet)", len(rest))}
				}
				break lines
			}
			if m.skipping {
				m.skipping = false
			} else {
				m.parseLine(m.off+int64(consumed), rest[:nl], visit)
			}
			consumed += nl + 1
		}
		if consumed == 0 {
			return nil // an incomplete last line: wait for more
		}
		m.off += int64(consumed)
		if m.partial != nil {
			return nil
		}
	}
	return nil
}

func (m *mapReader) parseLine(off int64, line []byte, visit func(start, size uint64, name []byte)) {
	m.line++
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 {
		m.empty++
		return
	}
	start, size, name, reason := parseMapLine(line)
	if reason != "" {
		m.bad++
		m.problem(off, m.line, "%s", reason)
		return
	}
	m.lines++
	visit(start, size, name)
}

// parseMapLine splits "START SIZE name"; reason is "" for a good line.
func parseMapLine(line []byte) (start, size uint64, name []byte, reason string) {
	f, rest := nextField(line)
	start, ok := hexnum.Parse(f)
	if !ok {
		return 0, 0, nil, fmt.Sprintf("start %q is not a hex number", clip(f))
	}
	f, rest = nextField(rest)
	size, ok = hexnum.Parse(f)
	if !ok {
		return 0, 0, nil, fmt.Sprintf("size %q is not a hex number", clip(f))
	}
	// The name is the rest of the line after one separator; it may hold
	// spaces ("long Hot.fibonacci(long)").
	if len(rest) > 0 && (rest[0] == ' ' || rest[0] == '\t') {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		return 0, 0, nil, "no name after the size"
	}
	if start+size < start {
		return 0, 0, nil, fmt.Sprintf("start %#x + size %#x wraps around", start, size)
	}
	return start, size, rest, ""
}

func nextField(b []byte) (field, rest []byte) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	j := i
	for j < len(b) && b[j] != ' ' && b[j] != '\t' {
		j++
	}
	return b[i:j], b[j:]
}

// clip keeps messages about garbage short.
func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

func (m *mapReader) reset() { *m = mapReader{name: m.name, buf: m.buf} }
