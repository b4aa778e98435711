package report

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/model"
)

// speedscopeSchema is the $schema every speedscope file names.
const speedscopeSchema = "https://www.speedscope.app/file-format-schema.json"

// speedscopeVersion is the file format's version this writer follows (the
// one that added name and activeProfileIndex).
const speedscopeVersion = "0.6.0"

// The speedscope file format (speedscope's src/lib/file-format-spec.ts):
// frames shared by every profile, then profiles; a sampled profile lists
// stacks as frame indexes from the root to the leaf, each with its weight.
type speedscopeFile struct {
	Schema             string              `json:"$schema"`
	Version            string              `json:"version"`
	Name               string              `json:"name,omitempty"`
	ActiveProfileIndex int                 `json:"activeProfileIndex"`
	Exporter           string              `json:"exporter,omitempty"`
	Shared             speedscopeShared    `json:"shared"`
	Profiles           []speedscopeProfile `json:"profiles"`
}

type speedscopeShared struct {
	Frames []speedscopeFrame `json:"frames"`
}

type speedscopeFrame struct {
	Name string `json:"name"`
	File string `json:"file,omitempty"`
	Line int64  `json:"line,omitempty"`
}

type speedscopeProfile struct {
	Type       string  `json:"type"` // "sampled"
	Name       string  `json:"name"`
	Unit       string  `json:"unit"`
	StartValue int64   `json:"startValue"`
	EndValue   int64   `json:"endValue"`
	Samples    [][]int `json:"samples"`
	Weights    []int64 `json:"weights"`
}

// WriteSpeedscope writes p in speedscope's file format: one sampled
// profile per thread, named by its thread, its samples in time order
// (end_timestamp_ns) so that speedscope's time-ordered view is the
// thread's timeline; weights are the sample type's values (wall time by
// default, so on- and off-CPU stretches both show). Frames are shared;
// kernel frames end in "_[k]" and JIT frames in "_[j]", as in the folded
// output. name titles the file. The busiest thread's profile opens first.
func WriteSpeedscope(w io.Writer, p *profile.Profile, name string, opt ExportOptions) error {
	if p == nil {
		return fmt.Errorf("report: WriteSpeedscope: nil profile")
	}
	vi, err := valueIndex(p, opt.SampleType)
	if err != nil {
		return err
	}
	keep, err := opt.keep(p)
	if err != nil {
		return err
	}
	unit := speedscopeUnit(p.SampleType[vi].Unit)
	a := analyze(tableOf(p))
	f := speedscopeFile{Schema: speedscopeSchema, Version: speedscopeVersion, Name: name, Exporter: "stallwatch",
		Shared: speedscopeShared{Frames: []speedscopeFrame{}}, Profiles: []speedscopeProfile{}}

	// Frames by what the analysis tells apart: name, file, line, kind.
	type frameKey struct {
		name, file string
		line       int64
		kind       model.FrameKind
	}
	frameIdx := map[frameKey]int{}
	stackFrames := make([][]int, len(a.stacks))
	for id, fr := range a.stacks {
		st := make([]int, 0, len(fr))
		for i := len(fr) - 1; i >= 0; i-- { // root first
			k := frameKey{fr[i].Name, fr[i].File, fr[i].Line, fr[i].Kind}
			fi, ok := frameIdx[k]
			if !ok {
				fi = len(f.Shared.Frames)
				frameIdx[k] = fi
				f.Shared.Frames = append(f.Shared.Frames, speedscopeFrame{Name: foldedFrame(fr[i]), File: fr[i].File, Line: fr[i].Line})
			}
			st = append(st, fi)
		}
		stackFrames[id] = st
	}

	// Samples per thread, in time order.
	type entry struct {
		stack      int
		end, value int64
		seq        int
	}
	byThread := map[string][]entry{}
	names := map[string]string{}
	var order []string
	for i, s := range p.Sample {
		v := s.Value[vi]
		if v <= 0 || (keep != nil && !keep(s)) {
			continue
		}
		tid := label(s, model.LabelThreadID)
		if _, ok := byThread[tid]; !ok {
			order = append(order, tid)
		}
		if n := label(s, model.LabelThreadName); n != "" {
			names[tid] = n
		}
		end, _ := numLabel(s, model.LabelEndTime)
		byThread[tid] = append(byThread[tid], entry{stack: a.stackOf(i), end: end, value: v, seq: i})
	}
	var base int64 // the earliest sample start: values count from it
	for _, es := range byThread {
		for _, e := range es {
			if e.end == 0 {
				continue
			}
			if start := e.end - e.value; base == 0 || start < base {
				base = start
			}
		}
	}
	what := clean(p.SampleType[vi].Type)
	if opt.Phase != "" {
		what += ", " + phaseText(opt.Phase)
	}
	var busiest, busiestV int64 = 0, -1
	threadOrder(order)
	for _, tid := range order {
		es := byThread[tid]
		sort.SliceStable(es, func(i, j int) bool {
			if es[i].end != es[j].end {
				return es[i].end < es[j].end
			}
			return es[i].seq < es[j].seq
		})
		sp := speedscopeProfile{Type: "sampled", Unit: unit}
		sp.Name = "tid " + clean(tid)
		if n := names[tid]; n != "" {
			sp.Name += " " + quoted(n)
		}
		sp.Name += " (" + what + ")"
		var sum int64
		timed := unit != "none" && base != 0
		for i, e := range es {
			sp.Samples = append(sp.Samples, stackFrames[e.stack])
			sp.Weights = append(sp.Weights, e.value)
			sum += e.value
			if timed && e.end != 0 {
				if start := e.end - e.value - base; i == 0 || start < sp.StartValue {
					sp.StartValue = max(start, 0)
				}
				sp.EndValue = max(sp.EndValue, e.end-base)
			}
		}
		if !timed || sp.EndValue < sp.StartValue+sum {
			// samples without times, or weights that overlap: speedscope
			// lays weights end to end from startValue
			sp.EndValue = sp.StartValue + sum
		}
		if sum > busiestV {
			busiest, busiestV = int64(len(f.Profiles)), sum
		}
		f.Profiles = append(f.Profiles, sp)
	}
	f.ActiveProfileIndex = int(busiest)
	enc := json.NewEncoder(w)
	return enc.Encode(&f)
}

// speedscopeUnit maps a pprof unit to one of speedscope's.
func speedscopeUnit(u string) string {
	switch u {
	case "nanoseconds", "microseconds", "milliseconds", "seconds", "bytes":
		return u
	}
	return "none"
}

// threadOrder sorts thread ids numerically.
func threadOrder(tids []string) {
	sort.Slice(tids, func(i, j int) bool {
		a, errA := strconv.Atoi(tids[i])
		b, errB := strconv.Atoi(tids[j])
		if errA == nil && errB == nil {
			return a < b
		}
		return tids[i] < tids[j]
	})
}
