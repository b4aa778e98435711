package report

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/stallwatch/stallwatch/model"
)

// How much of each list the first screen of report.txt shows; the details
// below show more.
const (
	screenThreads      = 10
	screenNotes        = 4
	screenDeadlocks    = 3
	screenStacks       = 3
	screenStacksBefore = 2
	screenFrames       = 6
	detailStacks       = 10
	detailFuncs        = 15
)

// WriteText writes report.txt: on the first screen the trigger, the stall,
// what was collected and lost, findings, the thread table and the top
// on-CPU and off-CPU stacks (by phase); below, the details: full stacks,
// top functions, the whole thread dump and the profile's comments.
func WriteText(w io.Writer, c *Capture) error {
	if c == nil {
		return fmt.Errorf("report: WriteText: nil capture")
	}
	return writeTextView(w, buildView(c))
}

func writeTextView(w io.Writer, v *view) error {
	bw := bufio.NewWriter(w)
	writeTextSummary(bw, v)
	writeTextDetails(bw, v)
	return bw.Flush()
}

func writeTextSummary(w io.Writer, v *view) {
	fmt.Fprintln(w, v.title)
	for _, f := range v.facts {
		fmt.Fprintf(w, "  %-11s %s\n", f.key, f.value)
	}
	if len(v.findings) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Findings (the most likely cause first)")
		for i, f := range v.findings {
			fmt.Fprintf(w, "  * %s\n", f.Summary)
			if i == 0 && f.Detail != "" {
				writeWrapped(w, "    ", f.Detail, 96)
			}
		}
	}
	if len(v.threads) > 0 {
		fmt.Fprintln(w)
		writeThreadTable(w, v.threads, screenThreads)
	}
	for _, s := range v.sections {
		fmt.Fprintln(w)
		writeSectionShort(w, s)
	}
}

func writeKernel(w io.Writer, k *kernelView) {
	fmt.Fprintln(w, k.title)
	for _, l := range k.lines {
		fmt.Fprintf(w, "  %-11s %s\n", l.key, l.value)
	}
}

// writeWaitsLong is "waiting on": the snapshot's waiting threads by what
// they wait on (sockets by peer, files by path, locks by owner), the
// longest waits first, each with its off-CPU stacks.
func writeWaitsLong(w io.Writer, gs []*waitGroup) {
	fmt.Fprintln(w, "Waiting on (the snapshot's waiting threads by what they wait on; their off-CPU time and stacks)")
	for _, g := range gs {
		fmt.Fprintf(w, "\n  %s — %s, %s\n", clean(g.subject), g.timeText(), plural(len(g.tids), "thread", "threads"))
		fmt.Fprintf(w, "    threads: %s\n", strings.Join(g.names, ", "))
		for _, st := range g.stacks {
			fmt.Fprintf(w, "    %s  %s\n", valueText(st.value, "nanoseconds"), stackSummary(st.frames, screenFrames))
		}
	}
}

// writeThreadTable writes the first max rows (the threads a hang is made
// of rank first: deadlocked, waiting for another thread, in
// uninterruptible sleep) and, when there are more of those than rows,
// says how many more the thread dump holds.
func writeThreadTable(w io.Writer, rows []threadRow, max int) {
	n := len(rows)
	if max > 0 && n > max {
		n = max
	}
	fmt.Fprintf(w, "Threads (%d; waiting first", len(rows))
	if n < len(rows) {
		fmt.Fprintf(w, "; %d shown, all in the thread dump below", n)
	}
	fmt.Fprintln(w, ")")
	fmt.Fprintf(w, "  %-8s %-16s %-2s %9s %9s %9s  %s\n", "TID", "NAME", "ST", "OFF-CPU", "RUNQ", "CPU", "TOP FRAME")
	for _, r := range rows[:n] {
		top := r.top
		if r.waits != "" {
			top += "  ⟵ " + r.waits
		}
		fmt.Fprintf(w, "  %-8d %-16s %-2s %9s %9s %9s  %s\n", r.tid, truncate(r.name, 16), r.state, r.offCPU, r.runq, r.cpu, truncate(top, 100))
	}
	more := 0
	for _, r := range rows[n:] {
		if r.rank <= rankUninterruptible {
			more++
		}
	}
	if more > 0 {
		fmt.Fprintf(w, "  … %s deadlocked, waiting for another or in uninterruptible sleep: in the thread dump below\n", plural(more, "more thread", "more threads"))
	}
}

func writeSectionShort(w io.Writer, s *section) {
	fmt.Fprintf(w, "%s — total %s\n", s.title, valueText(s.total, s.unit))
	if s.count == 0 {
		fmt.Fprintln(w, "  (none)")
		return
	}
	for _, st := range s.screen {
		fmt.Fprintf(w, "  %s %9s  %s", pct(st.value, s.total), valueText(st.value, s.unit), stackSummary(st.frames, screenFrames))
		if t := st.threadsText(3); t != "" {
			fmt.Fprintf(w, "   [%s]", t)
		}
		fmt.Fprintln(w)
	}
	if s.idleTotal > 0 {
		fmt.Fprintf(w, "  %s %9s  idle: %s only in kernel, libc or runtime code\n",
			pct(s.idleTotal, s.total), valueText(s.idleTotal, s.unit), plural(s.idleStacks, "stack", "stacks"))
	}
	if more := s.count - len(s.screen) - s.idleStacks; more > 0 {
		fmt.Fprintf(w, "  … %d more below\n", more)
	}
}

func writeTextDetails(w io.Writer, v *view) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, strings.Repeat("═", 78))
	fmt.Fprintln(w, "Details")
	if len(v.findings) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Findings, explained")
		for _, f := range v.findings {
			fmt.Fprintf(w, "\n  %s [%s, %s]\n", f.Summary, f.Severity, f.Kind)
			if f.Detail != "" {
				writeWrapped(w, "    ", f.Detail, 96)
			}
			if len(f.TIDs) > 0 {
				fmt.Fprintf(w, "    threads: %s\n", tidsText(f.TIDs))
			}
			if len(f.Functions) > 0 {
				fmt.Fprintf(w, "    functions: %s\n", strings.Join(f.Functions, ", "))
			}
		}
	}
	for _, k := range v.kernel {
		fmt.Fprintln(w)
		writeKernel(w, k)
		for _, n := range k.notes {
			fmt.Fprintf(w, "  note        %s\n", clean(n))
		}
	}
	if len(v.waits) > 0 {
		fmt.Fprintln(w)
		writeWaitsLong(w, v.waits)
	}
	for _, s := range v.sections {
		fmt.Fprintln(w)
		writeSectionLong(w, s)
	}
	if v.snap != nil {
		fmt.Fprintln(w)
		fmt.Fprintln(w, strings.Repeat("─", 78))
		// The dump writes to a bufio.Writer wrapping w; w is our own
		// buffered writer, whose errors Flush reports.
		_ = WriteThreadDump(w, v.snap)
	}
	if len(v.notes) > screenNotes+1 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Notes")
		for _, n := range v.notes {
			fmt.Fprintf(w, "  %s\n", clean(n))
		}
	}
	if len(v.comments) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Profile comments")
		for _, c := range v.comments {
			fmt.Fprintf(w, "  %s\n", clean(c))
		}
	}
}

func writeSectionLong(w io.Writer, s *section) {
	fmt.Fprintf(w, "%s — total %s\n", s.title, valueText(s.total, s.unit))
	if len(s.stacks) == 0 {
		fmt.Fprintln(w, "  (none)")
		return
	}
	fmt.Fprintf(w, "\n  Top functions (%s)\n", flatMeaning(s))
	fmt.Fprintf(w, "  %9s %6s %9s %6s  %s\n", "flat", "flat%", "cum", "cum%", "function")
	for i, f := range s.funcs {
		if i == detailFuncs {
			break
		}
		fmt.Fprintf(w, "  %9s %6s %9s %6s  %s\n", valueText(f.flat, s.unit), pct(f.flat, s.total), valueText(f.cum, s.unit), pct(f.cum, s.total), f.name)
	}
	for i, st := range s.stacks {
		fmt.Fprintf(w, "\n  #%d %s %s", i+1, strings.TrimSpace(pct(st.value, s.total)), valueText(st.value, s.unit))
		if t := st.threadsText(8); t != "" {
			fmt.Fprintf(w, "  %s", t)
		}
		fmt.Fprintln(w)
		for _, f := range st.frames {
			mark := " "
			if f.Kind == model.KindKernel {
				mark = "k"
			} else if f.Kind == model.KindJIT {
				mark = "j"
			}
			fmt.Fprintf(w, "    %s %-64s %s\n", mark, f.String(), f.Module)
		}
	}
	if more := s.count - len(s.stacks); more > 0 {
		fmt.Fprintf(w, "\n  … %d more stacks: `go tool pprof -traces` shows them all\n", more)
	}
}

// flatMeaning explains the flat column of a section's top functions.
func flatMeaning(s *section) string {
	if s.typ == model.TypeOffCPUTime {
		return "flat: the program's frame nearest the wait; cum: under it"
	}
	return "flat: where the time was; cum: under it"
}

// writeWrapped writes text in lines of at most width runes, each after
// indent, breaking at spaces.
func writeWrapped(w io.Writer, indent, text string, width int) {
	line := 0
	fmt.Fprint(w, indent)
	for i, word := range strings.Fields(text) {
		n := utf8.RuneCountInString(word)
		if i > 0 && line+1+n > width {
			fmt.Fprint(w, "\n"+indent)
			line = 0
		} else if i > 0 {
			fmt.Fprint(w, " ")
			line++
		}
		fmt.Fprint(w, word)
		line += n
	}
	fmt.Fprintln(w)
}

func tidsText(tids []int) string {
	parts := make([]string, len(tids))
	for i, t := range tids {
		parts[i] = strconv.Itoa(t)
	}
	return strings.Join(parts, ", ")
}
