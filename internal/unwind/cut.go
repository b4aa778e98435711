package unwind

import (
	"errors"
	"path"

	"github.com/stallwatch/stallwatch/model"
)

// Why a walk ended is a fact of the capture model (model.Cut): the
// unwinder makes it, snapshots and samples carry it, reports render it.
// The names below are the model's, under the unwinder's short names.
type (
	Reason = model.CutReason
	Cut    = model.Cut
)

const (
	Complete      = model.CutComplete
	TooDeep       = model.CutTooDeep
	NoUnwindInfo  = model.CutNoUnwindInfo
	CopyExhausted = model.CutCopyExhausted
	NotExecutable = model.CutNotExecutable
	BadFrame      = model.CutBadFrame
	StackSwitch   = model.CutStackSwitch
	Unreadable    = model.CutUnreadable
	NotACall      = model.CutNotACall
	WrongCallee   = model.CutWrongCallee
)

func moduleName(cr *codeRange) string {
	if cr == nil {
		return ""
	}
	return path.Base(cr.name)
}

// errOutsideCopy is wrapped by reads of a stack copy beyond its end.
var errOutsideCopy = errors.New("outside the stack copy")
