package v8

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// script is what a Script says of its source: its name, and where its
// lines end (read when a line is first asked for).
type script struct {
	obj        uint64
	name       string
	lineOffset int64 // the line its source starts at (vm.Script's lineOffset), 0-based
	colOffset  int64 // the column of its first line's start
	lineEnds   []int32
	linesErr   error // why lineEnds could not be had
	linesRead  bool
}

// maxLines bounds the line table of one script (a 20 MB bundle has about
// 500,000 lines).
const maxLines = 1 << 22

// maxCachedScripts bounds the scripts a Reader remembers.
const maxCachedScripts = 1 << 10

// scriptOf reads the Script of a SharedFunctionInfo's script field; nil
// when the field holds none (undefined for a builtin, a DebugInfo while a
// debugger is attached).
func (r *Reader) scriptOf(v uint64) *script {
	obj, t, err := r.h.typeOf("Script", v)
	if err != nil || t != r.l.typeScript {
		return nil
	}
	if s, ok := r.scripts[obj]; ok {
		return s
	}
	s := &script{obj: obj}
	if name, err := r.h.field("Script", obj, r.l.offScriptName); err == nil {
		// An eval's script, or one compiled from a string, has no name.
		s.name, _ = r.h.str(name, maxNameBytes)
	}
	// line_offset and column_offset follow the name (script.tq: source,
	// name, line_offset, column_offset); they have no symbol, so they
	// are believed only when both are Smis of a sane size.
	lo, err1 := r.h.field("Script", obj, r.l.offScriptName+8)
	co, err2 := r.h.field("Script", obj, r.l.offScriptName+16)
	if err1 == nil && err2 == nil && r.l.isSmi(lo) && r.l.isSmi(co) && abs(r.l.smi(lo)) < maxLines && abs(r.l.smi(co)) < 1<<20 {
		s.lineOffset, s.colOffset = r.l.smi(lo), r.l.smi(co)
	}
	if len(r.scripts) >= maxCachedScripts {
		clear(r.scripts)
	}
	r.scripts[obj] = s
	return s
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// position turns a script offset into a line and a column, both from 1,
// as V8's Script::GetPositionInfo does for a stack trace.
func (r *Reader) position(s *script, offset int64) (line, col int, err error) {
	if !s.linesRead {
		s.linesRead = true
		s.lineEnds, s.linesErr = r.lineEnds(s)
	}
	if s.linesErr != nil {
		return 0, 0, s.linesErr
	}
	if offset < 0 || len(s.lineEnds) == 0 || offset > int64(s.lineEnds[len(s.lineEnds)-1]) {
		return 0, 0, fmt.Errorf("script offset %d outside its %d lines", offset, len(s.lineEnds))
	}
	i := sort.Search(len(s.lineEnds), func(i int) bool { return int64(s.lineEnds[i]) >= offset })
	start := int64(0)
	if i > 0 {
		start = int64(s.lineEnds[i-1]) + 1
	}
	c := offset - start
	if i == 0 {
		c += s.colOffset
	}
	return i + int(s.lineOffset) + 1, int(c) + 1, nil
}

// lineEnds reads a script's line ends: the table V8 keeps once it has
// needed one (a stack trace, a profiler), else computed from its source
// as V8 does (String::CalculateLineEnds, with the ending line).
func (r *Reader) lineEnds(s *script) ([]int32, error) {
	v, err := r.h.field("Script", s.obj, r.l.offLineEnds)
	if err != nil {
		return nil, err
	}
	if obj, t, err := r.h.typeOf("line ends", v); err == nil && t == r.l.typeFixedArray {
		return r.smiArray(obj)
	}
	src, err := r.h.field("Script", s.obj, r.l.offScriptSource)
	if err != nil {
		return nil, err
	}
	return r.sourceLineEnds(src)
}

// smiArray reads a FixedArray of Smis.
func (r *Reader) smiArray(obj uint64) ([]int32, error) {
	n, err := r.h.field("FixedArray", obj, r.l.offArrayLength)
	if err != nil {
		return nil, err
	}
	if !r.l.isSmi(n) || r.l.smi(n) < 0 || r.l.smi(n) > maxLines {
		return nil, &ReadError{What: "line ends", Addr: obj, Err: fmt.Errorf("length %#x", n)}
	}
	var out []int32
	at := obj + uint64(r.l.offArrayData)
	for left := 8 * r.l.smi(n); left > 0; {
		b, err := r.h.readBytes("line ends", at, int(min(left, chunk)))
		if err != nil {
			return nil, err
		}
		for i := 0; i+8 <= len(b); i += 8 {
			w := binary.LittleEndian.Uint64(b[i:])
			if !r.l.isSmi(w) || r.l.smi(w) < 0 || r.l.smi(w) > maxStringLength ||
				(len(out) > 0 && int32(r.l.smi(w)) < out[len(out)-1]) {
				return nil, &ReadError{What: "line ends", Addr: at + uint64(i), Err: fmt.Errorf("entry %#x", w)}
			}
			out = append(out, int32(r.l.smi(w)))
		}
		at += uint64(len(b))
		left -= int64(len(b))
	}
	return out, nil
}

// sourceLineEnds finds the line terminators of a source (\n, \r not
// before \n, U+2028, U+2029), and ends the last line at the source's
// length.
func (r *Reader) sourceLineEnds(src uint64) ([]int32, error) {
	var ends []int32
	pos := int32(0)
	prevCR := false
	err := r.h.chars(src, 0, maxStringLength, 0, func(b []byte, wide bool) error {
		step := 1
		if wide {
			step = 2
		}
		for i := 0; i+step <= len(b); i += step {
			c := uint16(b[i])
			if wide {
				c = binary.LittleEndian.Uint16(b[i:])
			}
			if prevCR && c == '\n' {
				ends[len(ends)-1] = pos // "\r\n" ends at its '\n'
			} else if c == '\n' || c == '\r' || c == 0x2028 || c == 0x2029 {
				if len(ends) >= maxLines {
					return &ReadError{What: "source", Addr: src, Err: fmt.Errorf("more than %d lines: %w", maxLines, ErrBudget)}
				}
				ends = append(ends, pos)
			}
			prevCR = c == '\r'
			pos++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(ends, pos), nil
}
