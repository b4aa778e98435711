package report

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"
)

// WriteFolded writes p as folded stacks, one line per distinct stack:
// frames from the root to the leaf joined by ";", a space, and the total of
// sampleType ("" means the profile's default). flamegraph.pl, speedscope
// and inferno read it. Inlined functions are frames of their own; lines
// are sorted so the output is the same for the same profile.
func WriteFolded(w io.Writer, p *profile.Profile, sampleType string) error {
	if p == nil {
		return fmt.Errorf("report: WriteFolded: nil profile")
	}
	vi, err := valueIndex(p, sampleType)
	if err != nil {
		return err
	}
	a := analyze(p)
	vals, _ := a.totals(vi, nil)
	totals := map[string]int64{}
	var sb strings.Builder
	for id, v := range vals {
		if v == 0 {
			continue
		}
		fr := a.stacks[id]
		sb.Reset()
		for i := len(fr) - 1; i >= 0; i-- {
			if i < len(fr)-1 {
				sb.WriteByte(';')
			}
			sb.WriteString(foldedName(fr[i].name))
		}
		if len(fr) == 0 {
			sb.WriteString("[no stack]")
		}
		totals[sb.String()] += v
	}
	stacks := make([]string, 0, len(totals))
	for k := range totals {
		stacks = append(stacks, k)
	}
	sort.Strings(stacks)
	bw := bufio.NewWriter(w)
	for _, k := range stacks {
		bw.WriteString(k)
		bw.WriteByte(' ')
		bw.WriteString(strconv.FormatInt(totals[k], 10))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// foldedName keeps a frame name from breaking the format: ";" separates
// frames and a line ends a stack. (locationFrames has already escaped control
// characters; a C++ name may still hold a ";" in an operator.)
func foldedName(name string) string {
	if !strings.ContainsAny(name, ";\n") {
		return name
	}
	return strings.NewReplacer(";", ":", "\n", " ").Replace(name)
}
