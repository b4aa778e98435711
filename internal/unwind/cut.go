package unwind

import (
	"errors"
	"fmt"
	"path"
)

// Reason says why a walk ended.
type Reason uint8

const (
	// Complete: the walk reached the thread's first function (its rules
	// say nothing called it, or its return address is 0).
	Complete Reason = iota
	// TooDeep: the walk stopped at its frame limit.
	TooDeep
	// NoUnwindInfo: the code has no call frame information, no Go table,
	// and no frame pointer to follow (code built without them, JIT code
	// its runtime describes nowhere).
	NoUnwindInfo
	// CopyExhausted: the caller's frame lies beyond the copy of the stack
	// taken with the sample.
	CopyExhausted
	// NotExecutable: the next return address is in no executable mapping:
	// what the stack holds there is not a return address.
	NotExecutable
	// BadFrame: the unwind rules gave a frame that is not above its
	// callee, or a saved value that could not be read: a corrupt stack
	// or rules that do not fit the code.
	BadFrame
	// StackSwitch: the code switched stacks (the Go runtime's systemstack
	// and mcall): the callers are on another stack.
	StackSwitch
	// Unreadable: the stack could not be read at all.
	Unreadable
)

// Cut says why a walk ended: Complete, or where and why it was cut short.
// A Cut is comparable; reports render it with String.
type Cut struct {
	Reason Reason
	// Module is the file (its base name) or pseudo mapping the walk
	// stopped in, "" when none.
	Module string
	// PC is the address the walk stopped at.
	PC uint64
	// Limit is the frame limit (TooDeep) or the stack copy's size in
	// bytes (CopyExhausted).
	Limit int
}

// Truncated reports whether the walk ended before the thread's first
// function.
func (c Cut) Truncated() bool { return c.Reason != Complete }

func (c Cut) String() string {
	in := ""
	if c.Module != "" {
		in = " in " + c.Module
	}
	switch c.Reason {
	case Complete:
		return "complete"
	case TooDeep:
		return fmt.Sprintf("deeper than %d frames", c.Limit)
	case NoUnwindInfo:
		return "no unwind info" + in
	case CopyExhausted:
		return fmt.Sprintf("stack copy of %s exhausted", sizeText(c.Limit))
	case NotExecutable:
		return fmt.Sprintf("return address %#x is not in executable code", c.PC)
	case BadFrame:
		return "bad frame" + in
	case StackSwitch:
		return "stack switch" + in
	case Unreadable:
		return "stack not readable"
	}
	return fmt.Sprintf("reason %d", c.Reason)
}

func sizeText(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d bytes", n)
}

func moduleName(cr *codeRange) string {
	if cr == nil {
		return ""
	}
	return path.Base(cr.name)
}

// errOutsideCopy is wrapped by reads of a stack copy beyond its end.
var errOutsideCopy = errors.New("outside the stack copy")
