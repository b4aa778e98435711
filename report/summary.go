package report

import (
	"bufio"
	"fmt"
	"io"
)

// summaryFuncs is how many top functions a summary lists per section.
const summaryFuncs = 8

// WriteSummary writes what `stallwatch record` prints when it ends: one
// screen with the capture's facts (samples, lost records, threads), the
// findings, and for each section the top functions and the top stacks.
func WriteSummary(w io.Writer, c *Capture) error {
	if c == nil {
		return fmt.Errorf("report: WriteSummary: nil capture")
	}
	v := buildView(c)
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, v.title)
	for _, f := range v.facts {
		fmt.Fprintf(bw, "  %-11s %s\n", f.key, f.value)
	}
	for _, f := range v.findings {
		fmt.Fprintf(bw, "  * %s\n", f.Summary)
	}
	for _, s := range v.sections {
		fmt.Fprintln(bw)
		writeSummarySection(bw, s)
	}
	return bw.Flush()
}

func writeSummarySection(w io.Writer, s *section) {
	fmt.Fprintf(w, "%s — total %s\n", s.title, valueText(s.total, s.unit))
	if len(s.funcs) == 0 {
		fmt.Fprintln(w, "  (none)")
		return
	}
	fmt.Fprintf(w, "  %9s %6s %9s %6s  %s\n", "flat", "flat%", "cum", "cum%", "function ("+flatMeaning(s)+")")
	for i, f := range s.funcs {
		if i == summaryFuncs {
			break
		}
		fmt.Fprintf(w, "  %9s %6s %9s %6s  %s\n", valueText(f.flat, s.unit), pct(f.flat, s.total), valueText(f.cum, s.unit), pct(f.cum, s.total), truncate(f.name, 90))
	}
	if len(s.screen) > 0 {
		st := s.screen[0]
		fmt.Fprintf(w, "  heaviest stack %s: %s\n", pct(st.value, s.total), stackSummary(st.frames, screenFrames))
	}
}
