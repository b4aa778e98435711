package model

import "fmt"

// CutReason says why a stack walk ended.
type CutReason uint8

const (
	// CutComplete: the walk reached the thread's first function (its rules
	// say nothing called it, or its return address is 0).
	CutComplete CutReason = iota
	// CutTooDeep: the walk stopped at its frame limit.
	CutTooDeep
	// CutNoUnwindInfo: the code has no call frame information, no Go table,
	// and no frame pointer to follow (code built without them, JIT code
	// its runtime describes nowhere).
	CutNoUnwindInfo
	// CutCopyExhausted: the caller's frame lies beyond the copy of the stack
	// taken with the sample.
	CutCopyExhausted
	// CutNotExecutable: the next return address is in no executable mapping:
	// what the stack holds there is not a return address.
	CutNotExecutable
	// CutBadFrame: the unwind rules gave a frame that is not above its
	// callee, or a saved value that could not be read: a corrupt stack
	// or rules that do not fit the code.
	CutBadFrame
	// CutStackSwitch: the code switched stacks (the Go runtime's systemstack
	// and mcall): the callers are on another stack.
	CutStackSwitch
	// CutUnreadable: the stack could not be read at all.
	CutUnreadable
	// CutNotACall: the next return address, found by a rule that guesses
	// (a frame-pointer chain, a join with the kernel's), does not follow
	// a call instruction: it is no return address.
	CutNotACall
	// CutWrongCallee: the next return address follows a direct call of a
	// function that is not the frame below and does not lead there (by a
	// jump, or by one call of it whose frame the chain skipped): that
	// caller cannot have called it.
	CutWrongCallee
)

// Cut says why a stack walk ended: CutComplete, or where and why it was
// cut short. The unwinder (package internal/unwind) makes it; a stack that
// ends early carries it (Thread.UserCut) and ends with a pseudo-frame
// saying it. A Cut is comparable; reports render it with String.
type Cut struct {
	Reason CutReason
	// Module is the file (its base name) or pseudo mapping the walk
	// stopped in, "" when none.
	Module string
	// PC is the address the walk stopped at.
	PC uint64
	// Limit is the frame limit (CutTooDeep) or the size of the stack copy
	// asked for, in bytes (CutCopyExhausted).
	Limit int
	// Copied is how much of the stack the kernel copied
	// (CutCopyExhausted): less than Limit when the copy stopped early, at
	// a page that was not resident or at the end of the stack's mapping.
	Copied int
	// StackEnd says the short copy stopped where the stack's mapping
	// ends, not at a page that was not resident.
	StackEnd bool
}

// Short reports whether the walk ran out of a stack copy the kernel cut
// short: a larger copy would not have gone further.
func (c Cut) Short() bool { return c.Reason == CutCopyExhausted && c.Copied < c.Limit }

// Truncated reports whether the walk ended before the thread's first
// function.
func (c Cut) Truncated() bool { return c.Reason != CutComplete }

func (c Cut) String() string {
	in := ""
	if c.Module != "" {
		in = " in " + c.Module
	}
	switch c.Reason {
	case CutComplete:
		return "complete"
	case CutTooDeep:
		return fmt.Sprintf("deeper than %d frames", c.Limit)
	case CutNoUnwindInfo:
		return "no unwind info" + in
	case CutCopyExhausted:
		if c.Short() {
			why := "its next page was not resident"
			if c.StackEnd {
				why = "the stack ends there"
			}
			return fmt.Sprintf("stack copy cut short at %s of %s: %s", sizeText(c.Copied), sizeText(c.Limit), why)
		}
		return fmt.Sprintf("stack copy of %s exhausted", sizeText(c.Limit))
	case CutNotExecutable:
		return fmt.Sprintf("return address %#x is not in executable code", c.PC)
	case CutBadFrame:
		return "bad frame" + in
	case CutStackSwitch:
		return "stack switch" + in
	case CutUnreadable:
		return "stack not readable"
	case CutNotACall:
		return fmt.Sprintf("return address %#x follows no call%s", c.PC, in)
	case CutWrongCallee:
		return fmt.Sprintf("the call before %#x%s calls another function", c.PC, in)
	}
	return fmt.Sprintf("reason %d", c.Reason)
}

func sizeText(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d bytes", n)
}
