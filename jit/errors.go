package jit

import "fmt"

// FormatError is a defect in a jitdump or a perf map: the file, where in
// it, and what is wrong. Offsets are byte offsets from the file's start;
// perf map defects also carry their 1-based line number.
type FormatError struct {
	File   string
	Offset int64
	Line   int
	Reason string
}

func (e *FormatError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d (offset %d): %s", e.File, e.Line, e.Offset, e.Reason)
	}
	return fmt.Sprintf("%s: offset %d (%#x): %s", e.File, e.Offset, e.Offset, e.Reason)
}

// maxProblems bounds the defects kept per file: a garbage file must not
// grow a list as long as itself. Counts keep going.
const maxProblems = 32
