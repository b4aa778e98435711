package report

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/model"
)

// ExportOptions choose what WriteFolded and WriteSpeedscope write.
type ExportOptions struct {
	// SampleType is the value written ("" means the profile's default:
	// wall-time in stallwatch's profiles).
	SampleType string
	// Phase keeps the samples of one phase: PhaseBefore, PhaseDuring, or
	// "" for all.
	Phase string
	// NoThreads merges the threads' stacks (folded output only).
	NoThreads bool
}

// keep is the filter the options make; it checks the phase exists.
func (o ExportOptions) keep(p *profile.Profile) (func(*profile.Sample) bool, error) {
	if o.Phase == "" {
		return nil, nil
	}
	for _, ph := range phasesOf(p) {
		if ph == o.Phase {
			return inPhase(o.Phase), nil
		}
	}
	return nil, &PhaseError{Phase: o.Phase, Have: phasesOf(p)}
}

// PhaseError is a phase asked for that the profile lacks.
type PhaseError struct {
	Phase string
	Have  []string // "" is a profile without phases
}

func (e *PhaseError) Error() string {
	var have []string
	for _, h := range e.Have {
		if h != "" {
			have = append(have, h)
		}
	}
	if len(have) == 0 {
		return fmt.Sprintf("no phase %q: the profile has no phases (a `stallwatch record` capture)", e.Phase)
	}
	return fmt.Sprintf("no phase %q in the profile (it has %s)", e.Phase, strings.Join(have, ", "))
}

// WriteFolded writes p as folded stacks, one line per distinct stack:
// frames from the root to the leaf joined by ";", a space, and the total of
// the sample type. flamegraph.pl, speedscope and inferno read it. As
// perf's stackcollapse-perf.pl writes them with --tid, --kernel and
// --jit, each stack begins with its thread ("name-pid/tid"), kernel frames
// end in "_[k]" and JIT frames in "_[j]". Inlined functions are frames of
// their own; lines are sorted so the output is the same for the same
// profile.
func WriteFolded(w io.Writer, p *profile.Profile, opt ExportOptions) error {
	if p == nil {
		return fmt.Errorf("report: WriteFolded: nil profile")
	}
	vi, err := valueIndex(p, opt.SampleType)
	if err != nil {
		return err
	}
	keep, err := opt.keep(p)
	if err != nil {
		return err
	}
	a := analyze(tableOf(p))
	stackText := make([]string, len(a.stacks))
	for id, fr := range a.stacks {
		var sb strings.Builder
		for i := len(fr) - 1; i >= 0; i-- {
			if i < len(fr)-1 {
				sb.WriteByte(';')
			}
			sb.WriteString(foldedFrame(fr[i]))
		}
		if len(fr) == 0 {
			sb.WriteString("[no stack]")
		}
		stackText[id] = sb.String()
	}
	totals := map[string]int64{}
	for i, s := range p.Sample {
		v := s.Value[vi]
		if v == 0 || (keep != nil && !keep(s)) {
			continue
		}
		line := stackText[a.stackOf(i)]
		if !opt.NoThreads {
			if th := threadFrame(s); th != "" {
				line = th + ";" + line
			}
		}
		totals[line] += v
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

// threadFrame names a sample's thread as stackcollapse-perf.pl --tid
// does: "name-pid/tid" ("name-tid" without a pid); "" without a thread id.
func threadFrame(s *profile.Sample) string {
	tid := label(s, model.LabelThreadID)
	if tid == "" {
		return ""
	}
	name := label(s, model.LabelThreadName)
	if name == "" {
		name = "thread"
	}
	name = foldedName(clean(name))
	if pid := label(s, model.LabelProcessID); pid != "" {
		return name + "-" + foldedName(pid) + "/" + foldedName(tid)
	}
	return name + "-" + foldedName(tid)
}

// foldedFrame is a frame's name with its kind marked as perf's
// stackcollapse-perf.pl marks it.
func foldedFrame(f frame) string {
	name := foldedName(f.Name)
	switch f.Kind {
	case model.KindKernel:
		return name + "_[k]"
	case model.KindJIT:
		return name + "_[j]"
	}
	return name
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
