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
	// A sample often has the slice of the one before (a thread's samples
	// come in runs: a third of a recording's); that one is answered
	// without AddShared's map.
	var last []*model.Location
	lastID := -1
	for i := range p.Samples {
		stack := p.Samples[i].Stack
		if lastID < 0 || !sameSlice(stack, last) {
			last, lastID = stack, st.AddShared(stack) // samples share their stacks' slices
		}
		of[i] = lastID
	}
	return &stackTable{stackOf: of, stacks: st.Frames}
}

// sameSlice says whether a and b are one slice (its backing array and
// length), as AddShared tells them apart.
func sameSlice(a, b []*model.Location) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
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
	// Samples of one phase come in a run: only a change is looked up.
	for i := range p.Samples {
		if ph := p.Samples[i].Phase; i == 0 || ph != p.Samples[i-1].Phase {
			seen[ph] = true
		}
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
