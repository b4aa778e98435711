package report

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/model"
)

// ThreadsFromProfile rebuilds a snapshot from a threads.pb.gz profile, for
// rendering a thread dump from that file alone. It keeps what the profile
// holds (threads, states, stacks, wait times, who waits for whom); it
// cannot know what the profile does not say (syscall numbers, context
// switches, stop times). threads.json, beside it in a capture, has it all.
func ThreadsFromProfile(p *profile.Profile) (*model.Snapshot, error) {
	if len(p.SampleType) != 1 || p.SampleType[0].Type != model.TypeThreads {
		return nil, fmt.Errorf("not a thread snapshot profile (sample types %s, want %s/count)", sampleTypesText(p), model.TypeThreads)
	}
	snap := &model.Snapshot{Duration: time.Duration(p.DurationNanos), Notes: []string{"rebuilt from " + capdir.FileThreads + ": syscall numbers, context switches and stop times are not in that file"}}
	if p.TimeNanos != 0 {
		snap.Time = time.Unix(0, p.TimeNanos).UTC()
	}
	conv := newLocConverter(true)
	for i, s := range p.Sample {
		tidText := label(s, model.LabelThreadID)
		tid, err := strconv.Atoi(tidText)
		if err != nil {
			return nil, fmt.Errorf("sample %d: thread id %q is not a number", i, truncate(tidText, 40))
		}
		t := model.Thread{TID: tid, Name: label(s, model.LabelThreadName), Wchan: label(s, model.LabelWchan)}
		if snap.PID == 0 {
			snap.PID = processID(s)
		}
		if st := label(s, model.LabelState); st != "" {
			t.State = st[0]
		}
		if v, ok := numLabel(s, model.LabelBlocked); ok {
			t.OffCPUFor, t.OffCPUKnown = time.Duration(v), true
		}
		if v, ok := numLabel(s, model.LabelRunqueueWait); ok {
			t.RunqueueWait = time.Duration(v)
		}
		if sc := label(s, model.LabelSyscall); sc != "" {
			name, _, _ := strings.Cut(sc, "(")
			t.Syscall = &model.Syscall{Nr: -1, Name: name, Desc: sc}
		}
		owner, _ := numLabel(s, model.LabelOwner)
		if desc := label(s, model.LabelWaitsFor); desc != "" || owner != 0 {
			t.Wait = &model.Wait{Owner: int(owner), Desc: desc}
		}
		for _, l := range s.Location {
			sl := conv.location(l)
			if len(l.Line) == 1 && l.Line[0].Function != nil && strings.HasPrefix(l.Line[0].Function.Name, NoStackFrame[:len(NoStackFrame)-1]) {
				if why := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(l.Line[0].Function.Name, NoStackFrame[:len(NoStackFrame)-1]), ": "), "]"); why != "" {
					t.Err = model.RecordedError(why)
				}
				continue
			}
			if sl.Kind == model.KindKernel {
				t.Kernel = append(t.Kernel, sl)
			} else {
				t.User = append(t.User, sl)
			}
		}
		snap.Threads = append(snap.Threads, t)
	}
	snap.Locks = model.BuildLockGraph(snap.Threads)
	return snap, nil
}

func sampleTypesText(p *profile.Profile) string {
	var parts []string
	for _, st := range p.SampleType {
		parts = append(parts, st.Type+"/"+st.Unit)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// locConverter turns pprof locations back into the capture model's,
// sharing them as the symbolizer would. named keeps the symbolizer's
// promise that a location has a line: a line without a function is
// left out, and a location left without one is named by its address;
// otherwise the lines are the profile's, nameless ones included (a
// profile another tool wrote may be unsymbolized).
type locConverter struct {
	named bool
	locs  map[*profile.Location]*model.Location
	maps  map[*profile.Mapping]*model.Mapping
}

func newLocConverter(named bool) *locConverter {
	return &locConverter{named: named, locs: map[*profile.Location]*model.Location{}, maps: map[*profile.Mapping]*model.Mapping{}}
}

func (c *locConverter) location(l *profile.Location) *model.Location {
	if sl := c.locs[l]; sl != nil {
		return sl
	}
	sl := &model.Location{Addr: l.Address, Kind: locationKind(l)}
	if m := l.Mapping; m != nil {
		sl.Mapping = c.mapping(m, sl.Kind)
	}
	for _, ln := range l.Line {
		switch {
		case ln.Function != nil:
			sl.Lines = append(sl.Lines, model.Line{
				Function: ln.Function.Name, SystemName: ln.Function.SystemName,
				File: ln.Function.Filename, Line: ln.Line,
			})
		case !c.named:
			sl.Lines = append(sl.Lines, model.Line{Line: ln.Line})
		}
	}
	if c.named && len(sl.Lines) == 0 {
		sl.Lines = []model.Line{{Function: fmt.Sprintf("[unknown] %#x", l.Address)}}
	}
	c.locs[l] = sl
	return sl
}

// mapping converts m, its kind that of the first of its locations met.
func (c *locConverter) mapping(m *profile.Mapping, kind model.FrameKind) *model.Mapping {
	sm := c.maps[m]
	if sm == nil {
		sm = &model.Mapping{
			Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: m.File, BuildID: m.BuildID,
			Kind:         kind,
			HasFunctions: m.HasFunctions, HasFilenames: m.HasFilenames,
			HasLineNumbers: m.HasLineNumbers, HasInlineFrames: m.HasInlineFrames,
		}
		c.maps[m] = sm
	}
	return sm
}

// processID reads a sample's process_id: a string label, or a number as
// stallwatch 0.x wrote it in threads.pb.gz; 0 when absent.
func processID(s *profile.Sample) int {
	if pid, err := strconv.Atoi(label(s, model.LabelProcessID)); err == nil && pid > 0 {
		return pid
	}
	if pid, ok := numLabel(s, model.LabelProcessID); ok && pid > 0 && pid <= 1<<22 {
		return int(pid)
	}
	return 0
}
