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

// RefusedError is a symbol file that was found but not trusted: not a
// regular file, owned by another user, reached through a link out of the
// target's root, or unreadable.
type RefusedError struct {
	Path   string
	Reason string
}

func (e *RefusedError) Error() string { return "refused: " + e.Reason }

// BadRecordsError says that records or lines of a file were malformed and
// skipped; First is the first of them.
type BadRecordsError struct {
	Bad   int
	First *FormatError
}

func (e *BadRecordsError) Error() string {
	return fmt.Sprintf("%d bad records, first: %v", e.Bad, e.First)
}

func (e *BadRecordsError) Unwrap() error { return e.First }

// Err says what went wrong with the file, nil when nothing did: a
// *RefusedError when it was not trusted, the *FormatError of the record
// after which nothing could be read (Broken), or a *BadRecordsError. A
// last record still being written is not an error: see Truncated.
func (in *SourceInfo) Err() error {
	switch {
	case in.Refused:
		return &RefusedError{Path: in.Path, Reason: in.Reason}
	case in.Broken != nil:
		return in.Broken
	case len(in.Problems) > 0:
		return &BadRecordsError{Bad: in.Bad, First: in.Problems[0]}
	}
	return nil
}
