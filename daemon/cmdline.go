package daemon

import (
	"regexp"
	"regexp/syntax"
	"time"
	"unicode/utf8"
)

// maxCmdline is the most of a command line the daemon reads to select a
// process by: as long as the longest single argument the kernel allows
// (MAX_ARG_STRLEN, 128 KiB). A cmdline: pattern that can match only
// further in is not seen there.
const maxCmdline = 128 << 10

// cmdlineNeed is how much of a command line the cmdline patterns need to
// be decided: a pattern anchored at the start (^, \A) with no unbounded
// repetition matches within its longest match; any other may match
// anywhere, and maxCmdline is read. 0: no pattern.
func cmdlineNeed(patterns []*regexp.Regexp) int {
	need := 0
	for _, re := range patterns {
		need = max(need, patternNeed(re))
	}
	return need
}

func patternNeed(re *regexp.Regexp) int {
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return maxCmdline
	}
	t = t.Simplify()
	if !anchoredAtStart(t) {
		return maxCmdline
	}
	if n, ok := maxMatchLen(t); ok && n < maxCmdline {
		return n
	}
	return maxCmdline
}

// anchoredAtStart: every match begins at the start of the text.
func anchoredAtStart(t *syntax.Regexp) bool {
	switch t.Op {
	case syntax.OpBeginText:
		return true
	case syntax.OpConcat:
		return len(t.Sub) > 0 && anchoredAtStart(t.Sub[0])
	case syntax.OpCapture:
		return anchoredAtStart(t.Sub[0])
	case syntax.OpAlternate:
		for _, s := range t.Sub {
			if !anchoredAtStart(s) {
				return false
			}
		}
		return true
	}
	return false
}

// maxMatchLen is the longest text t matches, in bytes; false when
// unbounded.
func maxMatchLen(t *syntax.Regexp) (int, bool) {
	switch t.Op {
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return 0, true
	case syntax.OpLiteral:
		n := 0
		for _, r := range t.Rune {
			n += utf8.RuneLen(r)
			if t.Flags&syntax.FoldCase != 0 {
				n += utf8.UTFMax // a folded rune may be longer
			}
		}
		return n, true
	case syntax.OpCharClass, syntax.OpAnyCharNotNL, syntax.OpAnyChar:
		return utf8.UTFMax, true
	case syntax.OpCapture:
		return maxMatchLen(t.Sub[0])
	case syntax.OpQuest:
		return maxMatchLen(t.Sub[0])
	case syntax.OpRepeat:
		if t.Max < 0 {
			return 0, false
		}
		n, ok := maxMatchLen(t.Sub[0])
		return n * t.Max, ok
	case syntax.OpConcat:
		sum := 0
		for _, s := range t.Sub {
			n, ok := maxMatchLen(s)
			if !ok {
				return 0, false
			}
			sum += n
		}
		return sum, true
	case syntax.OpAlternate:
		most := 0
		for _, s := range t.Sub {
			n, ok := maxMatchLen(s)
			if !ok {
				return 0, false
			}
			most = max(most, n)
		}
		return most, true
	}
	return 0, false // star, plus, anything unbounded
}

// execBudget bounds the work the kernel's exec events make each second:
// the bytes of command lines read and the processes looked at. What is
// over it is left to the next scan of /proc, counted, and logged at most
// once a minute. The bytes are those read, not the patterns' need: a
// host's command lines are short, and charging each the 128 KiB an
// unanchored pattern may read left all but 32 execs a second to the
// scan.
type execBudget struct {
	window   time.Time
	bytes, n int
	over     uint64 // since the daemon started
	unlogged uint64
	logged   time.Time
}

const (
	execBytesPerSecond = 4 << 20
	execsPerSecond     = 2000
)

// take says whether one more exec event fits this second; what it reads
// is charged after.
func (b *execBudget) take(now time.Time) bool {
	if now.Sub(b.window) >= time.Second {
		b.window, b.bytes, b.n = now, 0, 0
	}
	if b.n >= execsPerSecond || b.bytes >= execBytesPerSecond {
		b.over++
		b.unlogged++
		return false
	}
	b.n++
	return true
}

// charge counts the bytes of command line an exec event taken read.
func (b *execBudget) charge(bytes int) { b.bytes += bytes }
