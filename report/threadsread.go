package report

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/snapshot"
	"github.com/stallwatch/stallwatch/symbolize"
)

// ThreadsFromProfile rebuilds a snapshot from a threads.pb.gz profile, for
// rendering a thread dump from that file alone. It keeps what the profile
// holds (threads, states, stacks, wait times, who waits for whom); it
// cannot know what the profile does not say (syscall numbers, context
// switches, stop times). threads.json, beside it in a capture, has it all.
func ThreadsFromProfile(p *profile.Profile) (*snapshot.Snapshot, error) {
	if len(p.SampleType) != 1 || p.SampleType[0].Type != TypeThreads {
		return nil, fmt.Errorf("not a thread snapshot profile (sample types %s, want %s/count)", sampleTypesText(p), TypeThreads)
	}
	snap := &snapshot.Snapshot{Duration: time.Duration(p.DurationNanos), Notes: []string{"rebuilt from " + FileThreads + ": syscall numbers, context switches and stop times are not in that file"}}
	if p.TimeNanos != 0 {
		snap.Time = time.Unix(0, p.TimeNanos).UTC()
	}
	for _, c := range p.Comments {
		if pid, ok := strings.CutPrefix(c, "stallwatch thread snapshot of pid "); ok {
			snap.PID, _ = strconv.Atoi(pid)
		}
		if cmd, ok := strings.CutPrefix(c, "command: "); ok {
			snap.Command = strings.Fields(cmd)
		}
	}
	conv := &locConverter{locs: map[*profile.Location]*symbolize.Location{}, maps: map[*profile.Mapping]*symbolize.Mapping{}}
	for i, s := range p.Sample {
		tidText := label(s, LabelThreadID)
		tid, err := strconv.Atoi(tidText)
		if err != nil {
			return nil, fmt.Errorf("sample %d: thread id %q is not a number", i, truncate(tidText, 40))
		}
		t := snapshot.Thread{TID: tid, Name: label(s, LabelThreadName), Wchan: label(s, LabelWchan)}
		if st := label(s, LabelState); st != "" {
			t.State = st[0]
		}
		if v, ok := numLabel(s, LabelBlocked); ok {
			t.OffCPUFor, t.OffCPUKnown = time.Duration(v), true
		}
		if v, ok := numLabel(s, LabelRunqueueWait); ok {
			t.RunqueueWait = time.Duration(v)
		}
		if sc := label(s, LabelSyscall); sc != "" {
			name, _, _ := strings.Cut(sc, "(")
			t.Syscall = &snapshot.Syscall{Nr: -1, Name: name, Desc: sc}
		}
		owner, _ := numLabel(s, LabelOwner)
		if desc := label(s, LabelWaitsFor); desc != "" || owner != 0 {
			t.Wait = &snapshot.Wait{Owner: int(owner), Desc: desc}
		}
		for _, l := range s.Location {
			sl := conv.location(l)
			if len(l.Line) == 1 && l.Line[0].Function != nil && strings.HasPrefix(l.Line[0].Function.Name, NoStackFrame[:len(NoStackFrame)-1]) {
				t.Err = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(l.Line[0].Function.Name, NoStackFrame[:len(NoStackFrame)-1]), ": "), "]")
				continue
			}
			if sl.Kind == symbolize.KindKernel {
				t.Kernel = append(t.Kernel, sl)
			} else {
				t.User = append(t.User, sl)
			}
		}
		snap.Threads = append(snap.Threads, t)
	}
	snap.Locks = waitsFor(snap.Threads)
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

// locConverter turns pprof locations back into symbolize ones, sharing
// them as the symbolizer would.
type locConverter struct {
	locs map[*profile.Location]*symbolize.Location
	maps map[*profile.Mapping]*symbolize.Mapping
}

func (c *locConverter) location(l *profile.Location) *symbolize.Location {
	if sl := c.locs[l]; sl != nil {
		return sl
	}
	sl := &symbolize.Location{Addr: l.Address, Kind: toKind(locationKind(l))}
	if m := l.Mapping; m != nil {
		sm := c.maps[m]
		if sm == nil {
			sm = &symbolize.Mapping{
				Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: m.File, BuildID: m.BuildID,
				Kind:         sl.Kind,
				HasFunctions: m.HasFunctions, HasFilenames: m.HasFilenames,
				HasLineNumbers: m.HasLineNumbers, HasInlineFrames: m.HasInlineFrames,
			}
			c.maps[m] = sm
		}
		sl.Mapping = sm
	}
	for _, ln := range l.Line {
		if ln.Function == nil {
			continue
		}
		sl.Lines = append(sl.Lines, symbolize.Line{
			Function: ln.Function.Name, SystemName: ln.Function.SystemName,
			File: ln.Function.Filename, Line: ln.Line,
		})
	}
	if len(sl.Lines) == 0 {
		sl.Lines = []symbolize.Line{{Function: "[unknown] " + hex(l.Address)}}
	}
	c.locs[l] = sl
	return sl
}

func toKind(k frameKind) symbolize.Kind {
	switch k {
	case kindKernel:
		return symbolize.KindKernel
	case kindJIT:
		return symbolize.KindJIT
	case kindNative:
		return symbolize.KindNative
	}
	return symbolize.KindUnknown
}

// waitsFor builds the lock graph from the threads' known owners. Each
// thread waits for at most one owner, so the graph is a set of paths that
// end at a thread that waits for no one, or in a cycle.
func waitsFor(threads []snapshot.Thread) snapshot.LockGraph {
	var g snapshot.LockGraph
	next := map[int]int{}
	in := map[int]int{}
	var from []int
	for _, t := range threads {
		if t.Wait == nil || t.Wait.Owner == 0 {
			continue
		}
		next[t.TID] = t.Wait.Owner
		in[t.Wait.Owner]++
		from = append(from, t.TID)
		g.Edges = append(g.Edges, snapshot.Edge{From: t.TID, To: t.Wait.Owner, Via: t.Wait.Desc})
	}
	sort.Ints(from)
	// Cycles: walk from each node; a node met twice on one walk closes one.
	done := map[int]bool{}
	inCycle := map[int]bool{}
	for _, start := range from {
		if done[start] {
			continue
		}
		pos := map[int]int{}
		var walk []int
		n := start
		for {
			if i, ok := pos[n]; ok {
				cyc := rotateToMin(walk[i:])
				g.Cycles = append(g.Cycles, cyc)
				for _, c := range cyc {
					inCycle[c] = true
				}
				break
			}
			if done[n] {
				break
			}
			pos[n] = len(walk)
			walk = append(walk, n)
			nx, ok := next[n]
			if !ok {
				break
			}
			n = nx
		}
		for _, w := range walk {
			done[w] = true
		}
	}
	// Chains: from each thread nobody waits for, follow the owners until a
	// thread that waits for no one or one in a cycle.
	for _, start := range from {
		if in[start] > 0 || inCycle[start] {
			continue
		}
		ch := []int{start}
		seen := map[int]bool{start: true}
		for n := next[start]; ; n = next[n] {
			ch = append(ch, n)
			if seen[n] || inCycle[n] {
				break
			}
			seen[n] = true
			if _, ok := next[n]; !ok {
				break
			}
		}
		g.Chains = append(g.Chains, ch)
	}
	sort.Slice(g.Cycles, func(i, j int) bool { return g.Cycles[i][0] < g.Cycles[j][0] })
	sort.SliceStable(g.Chains, func(i, j int) bool {
		if len(g.Chains[i]) != len(g.Chains[j]) {
			return len(g.Chains[i]) > len(g.Chains[j])
		}
		return g.Chains[i][0] < g.Chains[j][0]
	})
	return g
}

// rotateToMin starts a cycle at its smallest tid, as the snapshot does, so
// a deadlock reads the same whichever thread the walk began at.
func rotateToMin(c []int) []int {
	m := 0
	for i := range c {
		if c[i] < c[m] {
			m = i
		}
	}
	return append(append([]int(nil), c[m:]...), c[:m]...)
}
