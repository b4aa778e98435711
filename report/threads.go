package report

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/snapshot"
	"github.com/stallwatch/stallwatch/symbolize"
)

// Label keys of threads.pb.gz beyond the thread id and name.
const (
	LabelState = "state" // "S (sleeping)", as /proc/<pid>/status says it
	// LabelBlocked is numeric: how long the thread has been off the CPU,
	// in nanoseconds; absent when that is not known.
	LabelBlocked = "blocked"
	// LabelRunqueueWait is numeric: the thread's total time runnable but
	// waiting for a CPU (schedstat), in nanoseconds.
	LabelRunqueueWait = "runqueue wait"
	LabelWchan        = "wchan"
	LabelSyscall      = "syscall"
	LabelWaitsFor     = "waits for" // what the thread waits for, in words
	// LabelOwner is numeric: the tid holding what the thread waits for.
	LabelOwner = "owner tid"
	// LabelProcessID holds the pid whose thread it is, in decimal: a
	// string label, as ddprof (Datadog's native profiler) writes it; in
	// profile.pb.gz and threads.pb.gz alike.
	LabelProcessID = "process_id"
)

// NoStackFrame names the single frame of a thread whose stacks could not be
// read, so that it still counts in threads.pb.gz.
const NoStackFrame = "[no stack]"

// BuildThreads turns a snapshot into threads.pb.gz: one sample per thread
// (value 1, sample type threads/count), its kernel stack above its user
// stack, labelled with its id, name, state, how long it has been blocked and
// its run-queue wait.
func BuildThreads(snap *snapshot.Snapshot) (*profile.Profile, error) {
	if snap == nil {
		return nil, fmt.Errorf("report: BuildThreads: nil snapshot")
	}
	b := newBuilder()
	p := b.p
	p.SampleType = []*profile.ValueType{{Type: TypeThreads, Unit: "count"}}
	p.DefaultSampleType = TypeThreads
	p.PeriodType = &profile.ValueType{Type: TypeThreads, Unit: "count"}
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
func threadStack(t *snapshot.Thread) []*symbolize.Location {
	stack := make([]*symbolize.Location, 0, len(t.Kernel)+len(t.User))
	stack = append(stack, t.Kernel...)
	stack = append(stack, t.User...)
	if len(stack) == 0 {
		why := NoStackFrame
		if t.Err != nil {
			why = NoStackFrame[:len(NoStackFrame)-1] + ": " + errText(t.Err) + "]"
		}
		stack = append(stack, &symbolize.Location{Lines: []symbolize.Line{{Function: why}}})
	}
	return stack
}

func threadLabels(pid int, t *snapshot.Thread) map[string][]string {
	l := map[string][]string{
		LabelThreadID: {strconv.Itoa(t.TID)},
		LabelState:    {StateName(t.State)},
	}
	if pid > 0 {
		l[LabelProcessID] = []string{strconv.Itoa(pid)}
	}
	if t.Name != "" {
		l[LabelThreadName] = []string{t.Name}
	}
	if t.Wchan != "" {
		l[LabelWchan] = []string{t.Wchan}
	}
	if t.Syscall != nil {
		l[LabelSyscall] = []string{syscallText(t.Syscall)}
	}
	if t.Wait != nil && t.Wait.Desc != "" {
		l[LabelWaitsFor] = []string{t.Wait.Desc}
	}
	return l
}

func threadNumLabels(pid int, t *snapshot.Thread) map[string][]int64 {
	n := map[string][]int64{LabelRunqueueWait: {int64(t.RunqueueWait)}}
	if t.OffCPUKnown {
		n[LabelBlocked] = []int64{int64(t.OffCPUFor)}
	}
	if t.Wait != nil && t.Wait.Owner != 0 {
		n[LabelOwner] = []int64{int64(t.Wait.Owner)}
	}
	return n
}

func threadNumUnits(pid int, t *snapshot.Thread) map[string][]string {
	u := map[string][]string{LabelRunqueueWait: {"nanoseconds"}}
	if t.OffCPUKnown {
		u[LabelBlocked] = []string{"nanoseconds"}
	}
	if t.Wait != nil && t.Wait.Owner != 0 {
		u[LabelOwner] = []string{""}
	}
	return u
}

// StateName spells a /proc state letter the way /proc/<pid>/status does.
func StateName(s byte) string {
	switch s {
	case 'R':
		return "R (running)"
	case 'S':
		return "S (sleeping)"
	case 'D':
		return "D (disk sleep)"
	case 'T':
		return "T (stopped)"
	case 't':
		return "t (tracing stop)"
	case 'Z':
		return "Z (zombie)"
	case 'X':
		return "X (dead)"
	case 'I':
		return "I (idle)"
	case 'P':
		return "P (parked)"
	case 0:
		return "? (unknown)"
	}
	return strconv.QuoteRune(rune(s))
}

func syscallText(sc *snapshot.Syscall) string {
	if sc.Desc != "" {
		return sc.Desc
	}
	if sc.Name != "" {
		return sc.Name + "()"
	}
	return "syscall " + strconv.Itoa(sc.Nr)
}

// snapshotComments are the snapshot's facts as profile comments.
func snapshotComments(snap *snapshot.Snapshot) []string {
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
