package report

import (
	"path"
	"time"

	"github.com/stallwatch/stallwatch/internal/textfmt"
	"github.com/stallwatch/stallwatch/model"
)

// The words of a report are package textfmt's, the findings' own; here
// under the short names the renderings use.
var (
	fmtDur       = textfmt.Dur
	fmtCount     = textfmt.Count
	pct          = textfmt.Pct
	clean        = textfmt.Clean
	quoted       = textfmt.Quoted
	truncate     = textfmt.Truncate
	plural       = textfmt.Plural
	frameText    = textfmt.LineText
	topFrame     = textfmt.TopFrame
	stackSummary = textfmt.StackSummary
	doing        = textfmt.Doing
	syscallText  = textfmt.SyscallText
)

// frame is one function of a stack as the renderings show it.
type frame = textfmt.Frame

// timeLayout is how reports print a moment: UTC, to the millisecond.
const timeLayout = "2006-01-02 15:04:05.000 UTC"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout)
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
	case model.KindPython:
		return "[python]"
	}
	return ""
}

// errText is an error as a report prints it ("" for none): facts cross
// packages as errors and become text only here, at the edge.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
