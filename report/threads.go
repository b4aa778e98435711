package report

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/model"
)

// NoStackFrame names the single frame of a thread whose stacks could not be
// read, so that it still counts in threads.pb.gz.
const NoStackFrame = "[no stack]"

// BuildThreads turns a snapshot into threads.pb.gz: one sample per thread
// (value 1, sample type threads/count), its kernel stack above its user
// stack, labelled with its id, name, state, how long it has been blocked and
// its run-queue wait.
func BuildThreads(snap *model.Snapshot) (*profile.Profile, error) {
	if snap == nil {
		return nil, fmt.Errorf("report: BuildThreads: nil snapshot")
	}
	b := newBuilder()
	p := b.p
	p.SampleType = []*profile.ValueType{{Type: model.TypeThreads, Unit: "count"}}
	p.DefaultSampleType = model.TypeThreads
	p.PeriodType = &profile.ValueType{Type: model.TypeThreads, Unit: "count"}
	p.Period = 1
	if !snap.Time.IsZero() {
		p.TimeNanos = snap.Time.UnixNano()
	}
	p.DurationNanos = int64(snap.Duration)
	p.Comments = snapshotComments(snap)

	for i := range snap.Threads {
		t := &snap.Threads[i]
		stack := threadStack(t)
		locs, err := b.locations(stack)
		if err != nil {
			return nil, fmt.Errorf("report: thread %d: %w", t.TID, err)
		}
		p.Sample = append(p.Sample, &profile.Sample{
			Location: locs,
			Value:    []int64{1},
			Label:    threadLabels(snap.PID, t),
			NumLabel: threadNumLabels(snap.PID, t),
			NumUnit:  threadNumUnits(snap.PID, t),
		})
	}
	b.finish()
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("report: built an invalid threads profile: %w", err)
	}
	return p, nil
}

// threadStack is the thread's kernel stack followed by its user stack
// (innermost first), or a single NoStackFrame.
func threadStack(t *model.Thread) []*model.Location {
	stack := make([]*model.Location, 0, len(t.Kernel)+len(t.User))
	stack = append(stack, t.Kernel...)
	stack = append(stack, t.User...)
	if len(stack) == 0 {
		why := NoStackFrame
		if t.Err != nil {
			why = NoStackFrame[:len(NoStackFrame)-1] + ": " + errText(t.Err) + "]"
		}
		stack = append(stack, &model.Location{Lines: []model.Line{{Function: why}}})
	}
	return stack
}

func threadLabels(pid int, t *model.Thread) map[string][]string {
	l := map[string][]string{
		model.LabelThreadID: {strconv.Itoa(t.TID)},
		model.LabelState:    {model.StateName(t.State)},
	}
	if pid > 0 {
		l[model.LabelProcessID] = []string{strconv.Itoa(pid)}
	}
	if t.Name != "" {
		l[model.LabelThreadName] = []string{t.Name}
	}
	if t.Wchan != "" {
		l[model.LabelWchan] = []string{t.Wchan}
	}
	if t.Syscall != nil {
		l[model.LabelSyscall] = []string{syscallText(t.Syscall)}
	}
	if t.Wait != nil && t.Wait.Desc != "" {
		l[model.LabelWaitsFor] = []string{t.Wait.Desc}
	}
	return l
}

func threadNumLabels(pid int, t *model.Thread) map[string][]int64 {
	n := map[string][]int64{model.LabelRunqueueWait: {int64(t.RunqueueWait)}}
	if t.OffCPUKnown {
		n[model.LabelBlocked] = []int64{int64(t.OffCPUFor)}
	}
	if t.Wait != nil && t.Wait.Owner != 0 {
		n[model.LabelOwner] = []int64{int64(t.Wait.Owner)}
	}
	return n
}

func threadNumUnits(pid int, t *model.Thread) map[string][]string {
	u := map[string][]string{model.LabelRunqueueWait: {"nanoseconds"}}
	if t.OffCPUKnown {
		u[model.LabelBlocked] = []string{"nanoseconds"}
	}
	if t.Wait != nil && t.Wait.Owner != 0 {
		u[model.LabelOwner] = []string{""}
	}
	return u
}

// snapshotComments are the snapshot's facts as profile comments.
func snapshotComments(snap *model.Snapshot) []string {
	c := []string{fmt.Sprintf("stallwatch thread snapshot of pid %d", snap.PID)}
	if len(snap.Command) > 0 {
		c = append(c, "command: "+strings.Join(snap.Command, " "))
	}
	if !snap.Time.IsZero() {
		c = append(c, "taken at "+snap.Time.UTC().Format(timeLayout)+" in "+fmtDur(snap.Duration))
	}
	c = append(c, fmt.Sprintf("threads: %d", len(snap.Threads)))
	switch {
	case snap.PtraceUsed:
		c = append(c, "user stacks read under ptrace; longest stop "+fmtDur(snap.MaxStop))
	case snap.PtraceErr != nil:
		c = append(c, "no ptrace: "+errText(snap.PtraceErr))
	default:
		c = append(c, "no ptrace (user stacks from /proc only)")
	}
	for _, cyc := range snap.Locks.Cycles {
		c = append(c, "deadlock: "+cycleText(cyc))
	}
	if snap.TargetExited {
		c = append(c, "the target exited while it was read")
	}
	for _, n := range snap.Notes {
		c = append(c, "note: "+n)
	}
	return c
}

func cycleText(cyc []int) string {
	var sb strings.Builder
	for _, tid := range cyc {
		fmt.Fprintf(&sb, "tid %d → ", tid)
	}
	if len(cyc) > 0 {
		fmt.Fprintf(&sb, "tid %d", cyc[0])
	}
	return sb.String()
}
