package continuous

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// Ranged is the continuous profile of a time range: the periods that
// overlap it, merged, with only the samples stamped inside it.
type Ranged struct {
	Profile *profile.Profile
	// Files are the periods read, oldest first.
	Files []string
	// From and To are the range asked for, held to the periods found.
	From, To time.Time
	PIDs     []int
	// Command is the first period's command line, as its profile says.
	Command string
	// Notes are what the periods' profiles say of themselves that a
	// reader of the whole needs: the cut and marked ones, losses. A note
	// that several periods give is said once, at the first of them, with
	// how many more gave it.
	Notes []string
	// JITSources are the JIT symbol sources the periods' names were read
	// from, each once.
	JITSources []string
}

// MaxRangeFiles bounds the periods Range merges: a day of one-minute
// periods of one target.
const MaxRangeFiles = 24 * 60

// Range reads the periods under dir — one target's directory
// (OUT/profiles/PID-PROCESS), or OUT/profiles for every target — that
// overlap [from, to), and merges them, keeping the samples stamped
// inside the range. Profiles with and without off-CPU samples merge with
// the sample types of both.
func Range(ctx context.Context, dir string, from, to time.Time) (*Ranged, error) {
	if !from.Before(to) {
		return nil, fmt.Errorf("an empty range: from %v to %v", from, to)
	}
	files, err := findFiles(dir, from, to)
	if err != nil {
		return nil, err
	}
	r := &Ranged{From: to, To: from}
	var profs []*profile.Profile
	var notes noteSet
	for _, f := range files {
		if len(profs) == MaxRangeFiles {
			r.Notes = append(r.Notes, fmt.Sprintf("only the first %d periods of the range are read: ask for less", MaxRangeFiles))
			break
		}
		p, err := report.ReadProfile(ctx, f.path)
		if err != nil {
			return nil, err
		}
		start := time.Unix(0, p.TimeNanos)
		end := start.Add(time.Duration(p.DurationNanos))
		if !end.After(from) || !start.Before(to) {
			continue
		}
		r.Files = append(r.Files, f.path)
		r.From, r.To = minTime(r.From, maxTime(start, from)), maxTime(r.To, minTime(end, to))
		if f.pid != 0 && !slices.Contains(r.PIDs, f.pid) {
			r.PIDs = append(r.PIDs, f.pid)
		}
		for _, c := range p.Comments {
			if cmd, ok := strings.CutPrefix(c, "command: "); ok && r.Command == "" {
				r.Command = cmd
			}
			if n, ok := strings.CutPrefix(c, "note: "); ok {
				notes.add(n, start)
			}
			if src, ok := strings.CutPrefix(c, capture.JITSourceComment); ok && !slices.Contains(r.JITSources, src) {
				r.JITSources = append(r.JITSources, src)
			}
		}
		clipSamples(p, from, to)
		profs = append(profs, p)
	}
	r.Notes = append(r.Notes, notes.list()...)
	if len(profs) == 0 {
		return nil, fmt.Errorf("%s: %w from %s to %s%s", dir, errNoFiles, from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339), heldThere(dir))
	}
	widen(profs)
	merged, err := profile.Merge(profs)
	if err != nil {
		return nil, fmt.Errorf("merging the periods under %s: %w", dir, err)
	}
	merged.TimeNanos, merged.DurationNanos = r.From.UnixNano(), int64(r.To.Sub(r.From))
	merged.Comments = []string{fmt.Sprintf("stallwatch continuous profile: %d periods from %s to %s", len(profs),
		r.From.UTC().Format(time.RFC3339Nano), r.To.UTC().Format(time.RFC3339Nano))}
	r.Profile = merged
	return r, nil
}

// noteSet gathers the periods' notes, each text once: a JIT file's bad
// records or a mapping without symbols is said by every period after
// the first that met it.
type noteSet struct {
	order []string
	first map[string]time.Time
	more  map[string]int
}

func (n *noteSet) add(note string, at time.Time) {
	if _, ok := n.first[note]; ok {
		n.more[note]++
		return
	}
	if n.first == nil {
		n.first, n.more = map[string]time.Time{}, map[string]int{}
	}
	n.first[note] = at
	n.order = append(n.order, note)
}

func (n *noteSet) list() []string {
	out := make([]string, 0, len(n.order))
	for _, note := range n.order {
		s := n.first[note].UTC().Format(time.RFC3339) + ": " + note
		if more := n.more[note]; more > 0 {
			s += fmt.Sprintf(" (and in %d later %s)", more, plural(more, "period", "periods"))
		}
		out = append(out, s)
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// heldThere says, for a range with no period, which periods dir holds:
// what to ask for instead.
func heldThere(dir string) string {
	all, err := findFiles(dir, time.Unix(0, 0), time.Unix(1<<40, 0))
	if err != nil || len(all) == 0 {
		return ": there is none there"
	}
	return fmt.Sprintf(": the %d there begin from %s to %s (--from and --to within those)", len(all),
		all[0].start.UTC().Format(time.RFC3339), all[len(all)-1].start.UTC().Format(time.RFC3339))
}

// clipSamples keeps the samples stamped inside [from, to).
func clipSamples(p *profile.Profile, from, to time.Time) {
	f, t := from.UnixNano(), to.UnixNano()
	p.Sample = slices.DeleteFunc(p.Sample, func(s *profile.Sample) bool {
		end := s.NumLabel[model.LabelEndTime]
		return len(end) == 1 && (end[0] < f || end[0] >= t)
	})
}

// widen gives every profile the sample types of all of them, in the
// order a capture's profile has them, so that they merge.
func widen(ps []*profile.Profile) {
	order := []string{model.TypeCPUSamples, model.TypeCPUTime, model.TypeOffCPUTime, model.TypeWallTime}
	have := map[string]*profile.ValueType{}
	for _, p := range ps {
		for _, st := range p.SampleType {
			if have[st.Type] == nil {
				have[st.Type] = st
				if !slices.Contains(order, st.Type) {
					order = append(order, st.Type)
				}
			}
		}
	}
	var types []*profile.ValueType
	for _, name := range order {
		if st := have[name]; st != nil {
			types = append(types, &profile.ValueType{Type: st.Type, Unit: st.Unit})
		}
	}
	def := model.TypeCPUTime
	if have[model.TypeWallTime] != nil {
		def = model.TypeWallTime
	}
	for _, p := range ps {
		idx := make([]int, len(types))
		for i, st := range types {
			idx[i] = slices.IndexFunc(p.SampleType, func(v *profile.ValueType) bool { return v.Type == st.Type })
		}
		// Wall time is on- plus off-CPU: a profile without off-CPU
		// samples has its CPU time as its wall time.
		cpu := slices.IndexFunc(p.SampleType, func(v *profile.ValueType) bool { return v.Type == model.TypeCPUTime })
		for _, s := range p.Sample {
			v := make([]int64, len(types))
			for i, j := range idx {
				switch {
				case j >= 0:
					v[i] = s.Value[j]
				case types[i].Type == model.TypeWallTime && cpu >= 0:
					v[i] = s.Value[cpu]
				}
			}
			s.Value = v
		}
		p.SampleType = types
		p.DefaultSampleType = def
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// IsProfiles reports whether dir is a directory of continuous profiles:
// OUT/profiles, whose entries are target directories, or one target's
// directory of period files (never a capture directory).
func IsProfiles(dir string) bool {
	d, err := safedir.OpenForRead(dir)
	if err != nil {
		return false
	}
	defer d.Close()
	names, err := d.ReadDir()
	if err != nil {
		return false
	}
	for _, name := range names {
		if name == capdir.FileInfo {
			return false
		}
	}
	if _, ok := parseTargetDir(filepath.Base(dir)); ok {
		return slices.ContainsFunc(names, func(n string) bool { _, ok := parseFileName(n); return ok })
	}
	return filepath.Base(dir) == DirName
}
