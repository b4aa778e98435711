package report

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
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
	return 0, fmt.Errorf("no sample type %q in the profile (it has %s)", typ, strings.Join(have, ", "))
}

// hasType says whether p has a sample type of that name.
func hasType(p *profile.Profile, typ string) bool {
	_, err := valueIndex(p, typ)
	return err == nil && typ != ""
}

// frame is one function of a stack as the renderings show it.
type frame struct {
	name   string // function name, cleaned for printing
	file   string // base name of the source file, "" if unknown
	line   int64
	module string // base name of the mapping's file
	kind   frameKind
}

type frameKind uint8

const (
	kindNative frameKind = iota
	kindKernel
	kindJIT
	kindUnknown
)

// kernelSpace is where the x86-64 (and arm64) kernel half begins.
const kernelSpace = 0xffff800000000000

func locationKind(l *profile.Location) frameKind {
	if l.Address >= kernelSpace {
		return kindKernel
	}
	if l.Mapping == nil {
		return kindUnknown
	}
	f := l.Mapping.File
	switch {
	case f == KernelMapping || strings.HasPrefix(f, "[kernel"):
		return kindKernel
	case strings.Contains(f, "[jit]") || strings.HasPrefix(path.Base(f), "jit-") || strings.HasPrefix(path.Base(f), "perf-"):
		return kindJIT
	case f == "" || f == "[anon]" || f == "//anon":
		return kindUnknown
	case strings.HasPrefix(f, "[") && f != "[vdso]" && f != "[vsyscall]":
		// perf names kernel modules "[ext4]"
		return kindKernel
	}
	return kindNative
}

// frames expands a sample's stack, innermost first, inlined functions as
// frames of their own.
func frames(s *profile.Sample) []frame {
	var out []frame
	for _, l := range s.Location {
		k := locationKind(l)
		mod := ""
		if l.Mapping != nil {
			mod = path.Base(l.Mapping.File)
		}
		if len(l.Line) == 0 {
			out = append(out, frame{name: fmt.Sprintf("%#x", l.Address), module: mod, kind: k})
			continue
		}
		for _, ln := range l.Line {
			fr := frame{module: mod, kind: k, line: ln.Line}
			if ln.Function != nil {
				fr.name = clean(ln.Function.Name)
				if fr.name == "" {
					fr.name = clean(ln.Function.SystemName)
				}
				if ln.Function.Filename != "" {
					fr.file = clean(path.Base(ln.Function.Filename))
				}
			}
			if fr.name == "" {
				fr.name = fmt.Sprintf("%#x", l.Address)
			}
			out = append(out, fr)
		}
	}
	return out
}

func (f frame) String() string {
	if f.file != "" && f.line > 0 {
		return fmt.Sprintf("%s (%s:%d)", f.name, f.file, f.line)
	}
	return f.name
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
		seen[label(s, LabelPhase)] = true
	}
	var out []string
	for _, ph := range []string{PhaseDuring, PhaseBefore} {
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
	return func(s *profile.Sample) bool { return label(s, LabelPhase) == phase }
}

// stackTotal is one distinct stack (by function names) and its weight.
type stackTotal struct {
	frames  []frame // innermost first
	value   int64
	threads map[string]int64 // thread id → value
	names   map[string]string
}

// topStacks aggregates p's samples that pass keep by the function names of
// their stacks and returns them heaviest first, with the total.
func topStacks(p *profile.Profile, vi int, keep func(*profile.Sample) bool) ([]*stackTotal, int64) {
	by := map[string]*stackTotal{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		if v == 0 || (keep != nil && !keep(s)) {
			continue
		}
		total += v
		fr := frames(s)
		var kb strings.Builder
		for _, f := range fr {
			kb.WriteString(f.name)
			kb.WriteByte(0)
		}
		st := by[kb.String()]
		if st == nil {
			st = &stackTotal{frames: fr, threads: map[string]int64{}, names: map[string]string{}}
			by[kb.String()] = st
		}
		st.value += v
		if tid := label(s, LabelThreadID); tid != "" {
			st.threads[tid] += v
			if n := label(s, LabelThreadName); n != "" {
				st.names[tid] = n
			}
		}
	}
	out := make([]*stackTotal, 0, len(by))
	for _, st := range by {
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].value != out[j].value {
			return out[i].value > out[j].value
		}
		return stackString(out[i].frames, 0) < stackString(out[j].frames, 0)
	})
	return out, total
}

// stackString joins frames innermost first with "←"; max > 0 keeps that
// many frames and says how many were left out.
func stackString(fr []frame, max int) string {
	var sb strings.Builder
	n := len(fr)
	if max > 0 && n > max {
		n = max
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteString(" ← ")
		}
		sb.WriteString(fr[i].name)
	}
	if n < len(fr) {
		fmt.Fprintf(&sb, " ← … (%d more)", len(fr)-n)
	}
	return sb.String()
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

func topFunctions(p *profile.Profile, vi int, keep func(*profile.Sample) bool) ([]*funcTotal, int64) {
	by := map[string]*funcTotal{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		if v == 0 || (keep != nil && !keep(s)) {
			continue
		}
		total += v
		fr := frames(s)
		seen := map[string]bool{}
		for i, f := range fr {
			ft := by[f.name]
			if ft == nil {
				ft = &funcTotal{name: f.name}
				by[f.name] = ft
			}
			if i == 0 {
				ft.flat += v
			}
			if !seen[f.name] { // recursion counts once
				seen[f.name] = true
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
	return out, total
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
func threadTotals(p *profile.Profile, vi int, keep func(*profile.Sample) bool) map[string]int64 {
	out := map[string]int64{}
	for _, s := range p.Sample {
		if keep != nil && !keep(s) {
			continue
		}
		out[label(s, LabelThreadID)] += s.Value[vi]
	}
	return out
}
