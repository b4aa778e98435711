package report

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/internal/textfmt"
	"github.com/stallwatch/stallwatch/model"
)

// This file reads profiles back for the renderings: it works on any pprof
// profile, ours or not, so `stallwatch report` can render what it is given.

// valueIndex finds a sample type by name; "" means the profile's default
// (pprof's rule: DefaultSampleType, else the last one).
func valueIndex(p *profile.Profile, typ string) (int, error) {
	if len(p.SampleType) == 0 {
		return 0, fmt.Errorf("the profile has no sample types")
	}
	if typ == "" {
		typ = p.DefaultSampleType
		if typ == "" {
			return len(p.SampleType) - 1, nil
		}
	}
	for i, st := range p.SampleType {
		if st.Type == typ {
			return i, nil
		}
	}
	var have []string
	for _, st := range p.SampleType {
		have = append(have, st.Type)
	}
	return 0, &SampleTypeError{Type: typ, Have: have}
}

// SampleTypeError is a sample type asked for that the profile lacks.
type SampleTypeError struct {
	Type string   // asked for
	Have []string // the profile's
}

func (e *SampleTypeError) Error() string {
	return fmt.Sprintf("no sample type %q in the profile (it has %s)", e.Type, strings.Join(e.Have, ", "))
}

// hasType says whether p has a sample type of that name.
func hasType(p *profile.Profile, typ string) bool {
	_, err := valueIndex(p, typ)
	return err == nil && typ != ""
}

// kernelSpace is where the x86-64 (and arm64) kernel half begins.
const kernelSpace = 0xffff800000000000

// locationKind is what a profile's location says of its code (pprof keeps
// mappings, not kinds): kernel addresses and mappings named as perf names
// the kernel's ("[kernel.kallsyms]", "[ext4]"), Python frames
// ("[python]"), JIT code ("[jit]", a jitdump or perf map), code in no
// file ("", "[anon]"), native otherwise.
func locationKind(l *profile.Location) model.FrameKind {
	if l.Address >= kernelSpace {
		return model.KindKernel
	}
	if l.Mapping == nil {
		return model.KindUnknown
	}
	f := l.Mapping.File
	switch {
	case f == model.KernelMapping || strings.HasPrefix(f, "[kernel"):
		return model.KindKernel
	case f == model.PythonMapping:
		return model.KindPython
	case strings.Contains(f, "[jit]") || strings.HasPrefix(path.Base(f), "jit-") || strings.HasPrefix(path.Base(f), "perf-"):
		return model.KindJIT
	case f == "" || f == "[anon]" || f == "//anon":
		return model.KindUnknown
	case strings.HasPrefix(f, "[") && f != "[vdso]" && f != "[vsyscall]":
		// perf names kernel modules "[ext4]"
		return model.KindKernel
	}
	return model.KindNative
}

// label returns a sample's first string label of key.
func label(s *profile.Sample, key string) string {
	if v := s.Label[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func numLabel(s *profile.Sample, key string) (int64, bool) {
	if v := s.NumLabel[key]; len(v) > 0 {
		return v[0], true
	}
	return 0, false
}

// phasesOf lists the phases present in p, "during" first; a profile
// without phases has the single phase "".
func phasesOf(p *profile.Profile) []string {
	seen := map[string]bool{}
	for _, s := range p.Sample {
		seen[label(s, model.LabelPhase)] = true
	}
	return orderPhases(seen)
}

// phases lists the phases of the table's samples as phasesOf does, from
// their cells.
func (a *stackTable) phases() []string {
	seen := map[string]bool{}
	for _, cell := range a.cells().cells {
		seen[a.t.sets[cell.set].phase] = true
	}
	return orderPhases(seen)
}

func orderPhases(seen map[string]bool) []string {
	var out []string
	for _, ph := range []string{model.PhaseDuring, model.PhaseBefore} {
		if seen[ph] {
			out = append(out, ph)
			delete(seen, ph)
		}
	}
	rest := make([]string, 0, len(seen))
	for ph := range seen {
		rest = append(rest, ph)
	}
	sort.Strings(rest)
	out = append(out, rest...)
	if len(out) == 0 {
		out = []string{""}
	}
	return out
}

func inPhase(phase string) func(*profile.Sample) bool {
	return func(s *profile.Sample) bool { return label(s, model.LabelPhase) == phase }
}

// setInPhase keeps the label sets of a phase.
func setInPhase(phase string) func(*labelSet) bool {
	return func(ls *labelSet) bool { return ls.phase == phase }
}

// stackTable is a profile read once for the renderings: each sample's
// stack as one of the profile's distinct stacks by function name
// (textfmt.Stacks), over the profile's locations as the capture model has
// them, so that a stack reads the same here as in the findings.
type stackTable struct {
	t      *table
	p      *profile.Profile
	stacks [][]frame // per distinct stack, innermost first
	// textOf is the distinct stack of each of the table's stacks.
	textOf []int
	// sums are the samples summed by the table's stack and label set,
	// made once (cells): what the rankings read.
	sums *setSums
}

func analyze(t *table) *stackTable {
	a := &stackTable{t: t, p: t.p}
	conv := newLocConverter(false)
	st := textfmt.NewStacks()
	// Each of the table's stacks is converted once.
	var stack []*model.Location
	textOf := make([]int, len(t.stacks))
	for id, locs := range t.stacks {
		stack = stack[:0]
		for _, l := range locs {
			stack = append(stack, conv.location(l))
		}
		textOf[id] = st.Add(stack)
	}
	a.stacks, a.textOf = st.Frames, textOf
	return a
}

// stackOf is sample i's distinct stack.
func (a *stackTable) stackOf(i int) int { return a.textOf[a.t.stack[i]] }

// setSums are a table's samples summed by stack and label set: a few
// hundred sums for a hundred thousand samples, which every ranking of a
// view (each sample type in each phase, and the threads of its stacks)
// reads instead of the samples. The sums of a value are made when it is
// first asked for: a view ranks two of a capture's four.
type setSums struct {
	t      *table
	cells  []setSum
	cellOf []int32   // per sample
	vals   [][]int64 // by value index, per cell; nil until asked for
	// last is, by value index and per cell, the last sample with a value
	// other than 0 (-1: none), which orders the threads' names as the
	// samples did.
	last [][]int32
}

type setSum struct{ stack, set int32 }

// cells finds the table's samples' cells (stack and label set), once.
func (a *stackTable) cells() *setSums {
	if a.sums != nil {
		return a.sums
	}
	t := a.t
	s := &setSums{t: t, cellOf: make([]int32, t.len()), vals: make([][]int64, t.nv), last: make([][]int32, t.nv)}
	index := newSlotIndex(len(t.stacks)*len(t.sets), max(t.len(), 1<<16))
	prevStack, prevSet, at := int32(-1), int32(-1), 0
	for i := range t.len() {
		stack, set := t.stack[i], t.set[i]
		if stack != prevStack || set != prevSet {
			// A sample repeats the one before's stack and thread often
			// (a thread's run of samples in one place).
			var added bool
			at, added = index.slot(uint64(stack)*uint64(len(t.sets))+uint64(set), len(s.cells))
			if added {
				s.cells = append(s.cells, setSum{stack: stack, set: set})
			}
			prevStack, prevSet = stack, set
		}
		s.cellOf[i] = int32(at)
	}
	a.sums = s
	return s
}

// value is cell c's sum of value vi, and the last sample that added to
// it (-1: none did).
func (s *setSums) value(c, vi int) (int64, int32) {
	if s.vals[vi] == nil {
		s.sum(vi)
	}
	return s.vals[vi][c], s.last[vi][c]
}

// sum adds the samples' value vi into their cells.
func (s *setSums) sum(vi int) {
	t := s.t
	vals := make([]int64, len(s.cells))
	last := slices.Repeat([]int32{-1}, len(s.cells))
	for i, c := range s.cellOf {
		if v := t.values[i*t.nv+vi]; v != 0 {
			vals[c] += v
			last[c] = int32(i)
		}
	}
	s.vals[vi], s.last[vi] = vals, last
}

// waitSite is the index of the innermost frame of the program's own code
// in stack id; failing that, of the innermost user frame; failing that, 0.
func (a *stackTable) waitSite(id int) int { return textfmt.WaitSite(a.stacks[id]) }

// systemOnly says whether a stack has no frame of the program's own code.
func (a *stackTable) systemOnly(id int) bool { return textfmt.SystemOnly(a.stacks[id]) }

// totals sums value vi of the samples that pass keep (nil: all) per
// distinct stack, and overall.
func (a *stackTable) totals(vi int, keep func(*labelSet) bool) ([]int64, int64) {
	vals := make([]int64, len(a.stacks))
	var total int64
	ok := a.t.keepSets(keep)
	sums := a.cells()
	for c, cell := range sums.cells {
		if v, _ := sums.value(c, vi); v != 0 && ok[cell.set] {
			vals[a.textOf[cell.stack]] += v
			total += v
		}
	}
	return vals, total
}

// stackTotal is one distinct stack and its weight.
type stackTotal struct {
	frames  []frame // innermost first
	value   int64
	threads map[string]int64 // thread id → value
	names   map[string]string
}

// top returns the n heaviest stacks of vals (n <= 0: all), with the
// threads they came from, and how many stacks have weight at all.
func (a *stackTable) top(vals []int64, n int, vi int, keep func(*labelSet) bool) ([]*stackTotal, int) {
	var ids []int
	for id, v := range vals {
		if v != 0 {
			ids = append(ids, id)
		}
	}
	// Ties go to the stack seen first: the order of the profile's
	// samples, which survives writing and reading the file.
	sort.Slice(ids, func(i, j int) bool {
		if vals[ids[i]] != vals[ids[j]] {
			return vals[ids[i]] > vals[ids[j]]
		}
		return ids[i] < ids[j]
	})
	count := len(ids)
	if n > 0 && len(ids) > n {
		ids = ids[:n]
	}
	out := make([]*stackTotal, len(ids))
	rank := make([]int32, len(a.stacks)) // by stack: its place in out plus one
	for i, id := range ids {
		out[i] = &stackTotal{frames: a.stacks[id], value: vals[id], threads: map[string]int64{}, names: map[string]string{}}
		rank[id] = int32(i + 1)
	}
	a.threadsOf(out, rank, vi, keep)
	return out, count
}

// threadsOf fills in the threads of the stacks in out (rank: a stack's
// place in out plus one, 0 for one not in it) and their names: the name
// of each thread's last sample. The samples are summed by stack and
// label set first — a few hundred sums for a hundred thousand samples —
// and only the sums are looked up by thread id.
func (a *stackTable) threadsOf(out []*stackTotal, rank []int32, vi int, keep func(*labelSet) bool) {
	t := a.t
	ok := t.keepSets(keep)
	cells := newCellSums(len(out), len(t.sets))
	sums := a.cells()
	for c, cell := range sums.cells {
		r := rank[a.textOf[cell.stack]]
		if r == 0 || !ok[cell.set] {
			continue
		}
		if v, last := sums.value(c, vi); last >= 0 {
			cells.add(r-1, cell.set, v, last)
		}
	}
	for _, c := range cells.inLastOrder() {
		st, ls := out[c.rank], &t.sets[c.set]
		if ls.tidText == "" {
			continue
		}
		st.threads[ls.tidText] += c.v
		if ls.name != "" {
			st.names[ls.tidText] = ls.name
		}
	}
}

// cellSums sums values by (rank, label set).
type cellSums struct {
	nsets uint64
	index slotIndex // by rank*nsets+set: the cell's index in cells
	cells []cellSum
}

type cellSum struct {
	rank, set int32
	v         int64
	last      int32 // the last of the samples added
}

func newCellSums(ranks, sets int) *cellSums {
	return &cellSums{nsets: uint64(sets), index: newSlotIndex(ranks*sets, 1<<16)}
}

func (c *cellSums) add(rank, set int32, v int64, sample int32) {
	at, added := c.index.slot(uint64(rank)*c.nsets+uint64(set), len(c.cells))
	if added {
		c.cells = append(c.cells, cellSum{rank: rank, set: set})
	}
	cell := &c.cells[at]
	cell.v += v
	cell.last = max(cell.last, sample)
}

// inLastOrder is the sums in the order of their last samples.
func (c *cellSums) inLastOrder() []cellSum {
	slices.SortFunc(c.cells, func(x, y cellSum) int { return cmp.Compare(x.last, y.last) })
	return c.cells
}

// threadsText names the threads of a stack, heaviest first.
func (st *stackTotal) threadsText(max int) string {
	tids := make([]string, 0, len(st.threads))
	for t := range st.threads {
		tids = append(tids, t)
	}
	sort.Slice(tids, func(i, j int) bool {
		if st.threads[tids[i]] != st.threads[tids[j]] {
			return st.threads[tids[i]] > st.threads[tids[j]]
		}
		a, _ := strconv.Atoi(tids[i])
		b, _ := strconv.Atoi(tids[j])
		return a < b
	})
	var parts []string
	for i, t := range tids {
		if i == max {
			parts = append(parts, fmt.Sprintf("+%d more", len(tids)-max))
			break
		}
		if n := st.names[t]; n != "" {
			parts = append(parts, clean(t)+" "+quoted(n))
		} else {
			parts = append(parts, clean(t))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	if len(tids) == 1 {
		return "tid " + parts[0]
	}
	return "tids " + strings.Join(parts, ", ")
}

// funcTotal is a function's flat (innermost) and cumulative weight.
type funcTotal struct {
	name      string
	flat, cum int64
}

// funcs ranks functions by flat weight, then cumulative. With waitSite
// (off-CPU time) the flat weight goes to the frame of the program's own
// code nearest the top, the one that waited: every off-CPU stack has the
// kernel's schedule() on top, which says nothing.
func (a *stackTable) funcs(vals []int64, waitSite bool) []*funcTotal {
	by := map[string]*funcTotal{}
	seen := map[string]bool{}
	for id, v := range vals {
		if v == 0 {
			continue
		}
		clear(seen)
		flatAt := 0
		if waitSite {
			flatAt = a.waitSite(id)
		}
		for i, f := range a.stacks[id] {
			ft := by[f.Name]
			if ft == nil {
				ft = &funcTotal{name: f.Name}
				by[f.Name] = ft
			}
			if i == flatAt {
				ft.flat += v
			}
			if !seen[f.Name] { // recursion counts once
				seen[f.Name] = true
				ft.cum += v
			}
		}
	}
	out := make([]*funcTotal, 0, len(by))
	for _, ft := range by {
		out = append(out, ft)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].flat != out[j].flat {
			return out[i].flat > out[j].flat
		}
		if out[i].cum != out[j].cum {
			return out[i].cum > out[j].cum
		}
		return out[i].name < out[j].name
	})
	return out
}

// valueText prints a value in its sample type's unit.
func valueText(v int64, unit string) string {
	switch unit {
	case "nanoseconds":
		return fmtDur(time.Duration(v))
	case "count", "":
		return fmtCount(v)
	}
	return fmtCount(v) + " " + unit
}

// threadTotals sums a value per thread id.
func (a *stackTable) threadTotals(vi int, keep func(*labelSet) bool) map[string]int64 {
	t := a.t
	bySet := make([]int64, len(t.sets))
	ok := t.keepSets(keep)
	sums := a.cells()
	for c, cell := range sums.cells {
		if ok[cell.set] {
			v, _ := sums.value(c, vi)
			bySet[cell.set] += v
		}
	}
	out := map[string]int64{}
	for i, v := range bySet {
		if ok[i] {
			out[t.sets[i].tidText] += v
		}
	}
	return out
}
