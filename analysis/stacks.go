package analysis

import (
	"sort"

	"github.com/stallwatch/stallwatch/internal/textfmt"
	"github.com/stallwatch/stallwatch/model"
)

// frame is one function of a stack as the findings name it.
type frame = textfmt.Frame

// stackTable numbers the stacks of a profile's samples by function name,
// as the renderings tell them apart (textfmt.Stacks): stackOf[i] is the
// stack of sample i, stacks[id] its frames, innermost first.
type stackTable struct {
	stackOf []int
	stacks  [][]frame
}

func readStacks(p *model.Profile) *stackTable {
	st := textfmt.NewStacks()
	of := make([]int, len(p.Samples))
	for i := range p.Samples {
		of[i] = st.AddShared(p.Samples[i].Stack) // samples share their stacks' slices
	}
	return &stackTable{stackOf: of, stacks: st.Frames}
}

// waitSite is the index of the innermost frame of the program's own code
// in stack id (textfmt.WaitSite).
func (a *stackTable) waitSite(id int) int { return textfmt.WaitSite(a.stacks[id]) }

// systemOnly says whether a stack has no frame of the program's own code.
func (a *stackTable) systemOnly(id int) bool { return textfmt.SystemOnly(a.stacks[id]) }

// judgedPhase is the phase the findings judge: "during" (the stall)
// when there is one, else "before", else the first other phase by
// name; "" for a profile without phases.
func judgedPhase(p *model.Profile) string {
	seen := map[string]bool{}
	for i := range p.Samples {
		seen[p.Samples[i].Phase] = true
	}
	for _, ph := range []string{model.PhaseDuring, model.PhaseBefore} {
		if seen[ph] {
			return ph
		}
	}
	rest := make([]string, 0, len(seen))
	for ph := range seen {
		rest = append(rest, ph)
	}
	sort.Strings(rest)
	if len(rest) == 0 {
		return ""
	}
	return rest[0]
}
