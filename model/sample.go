package model

import "time"

// Names in profile.pb.gz. Datadog's backend and its profilers use these
// sample types and label keys; package report's doc ("Profiles") says
// what each holds.
const (
	TypeCPUSamples = "cpu-samples"  // unit "count"
	TypeCPUTime    = "cpu-time"     // unit "nanoseconds"
	TypeOffCPUTime = "off-cpu-time" // unit "nanoseconds"
	TypeWallTime   = "wall-time"    // unit "nanoseconds": on- plus off-CPU
	TypeThreads    = "threads"      // unit "count", threads.pb.gz

	// LabelThreadID holds the tid in decimal. It is a string label, as
	// Datadog's profilers (ddprof, dd-trace-rb/js/dotnet) write it.
	LabelThreadID   = "thread id"
	LabelThreadName = "thread name"
	// LabelPhase is PhaseBefore or PhaseDuring; absent in `record` captures.
	LabelPhase = "phase"
	// LabelOffCPU is set on off-CPU samples only: "blocked" when the thread
	// slept, "preempted" when it stayed runnable and waited for a CPU.
	LabelOffCPU = "off-cpu"
	// LabelEndTime is numeric: when the sample ended, in nanoseconds
	// since the Unix epoch (an on-CPU sample's moment, the end of an
	// off-CPU interval), as Datadog's profilers stamp samples for their
	// timeline (libdatadog adds it without a unit).
	LabelEndTime = "end_timestamp_ns"

	PhaseBefore = "before" // from the flight recorder, before the trigger
	PhaseDuring = "during" // sampled after the trigger

	// KernelMapping is the pprof mapping name of kernel frames, as perf
	// names it.
	KernelMapping = "[kernel.kallsyms]"
)

// Sample is one symbolized sample: what the capture package makes of a
// sampler.Sample and the Locations its addresses resolve to, and what
// package report turns into profile.pb.gz.
type Sample struct {
	Stack      []*Location // innermost first, kernel frames first; no nil entries
	TID        int
	ThreadName string
	Phase      string // PhaseBefore, PhaseDuring, or "" (record)
	OffCPU     bool   // an off-CPU interval (else an on-CPU sample)
	// Preempted marks an off-CPU interval spent runnable, waiting for a
	// CPU (the sampler's Preempted): CPU starvation rather than blocking.
	Preempted bool
	Count     int64 // on-CPU samples it stands for (0 means 1)
	Nanos     int64 // on-CPU: CPU time (0 means Count×Meta.Period); off-CPU: blocked ns
	// EndNanos is when the sample ended, in nanoseconds since the Unix
	// epoch: an on-CPU sample's moment, the end of an off-CPU interval
	// (0: unknown; such samples merge by stack and labels).
	EndNanos int64
	// PID is the process the thread belongs to (0: not labelled).
	PID int
}

// Meta is what a profile says about itself.
type Meta struct {
	Start    time.Time     // of the window the samples cover
	Duration time.Duration // of that window
	Period   int64         // on-CPU sampling period in ns (1e9/freq)
	Comments []string      // capture facts: trigger, pid, command, lost records, notes
}

// Profile is a capture's samples as profile.pb.gz keeps them, with what
// the profile says of itself: the form the findings are drawn from.
type Profile struct {
	Meta
	Samples []Sample
	// Mappings are the profile's mappings in its order (the executable
	// first, then by address).
	Mappings []*Mapping
	// OnCPU and OffCPU say that the profile measures on-CPU and off-CPU
	// time: stallwatch's always do, whatever was sampled; another
	// profiler's may measure neither.
	OnCPU, OffCPU bool
	// Spans, when not nil, is each phase's span of sample times, for
	// Samples added together by stack and labels, whose EndNanos that
	// drops (report.Samples): the findings judge a window by it.
	Spans map[string]Span
}

// Span is the time samples cover, in nanoseconds since the Unix epoch:
// from the earliest start (an off-CPU interval's beginning, an on-CPU
// sample's moment less its CPU time) to the latest end.
type Span struct {
	Start, End int64
}

// Add widens the span to cover a sample that ended at end after nanos.
func (s *Span) Add(end, nanos int64) {
	start := end - nanos
	if s.End == 0 && s.Start == 0 {
		s.Start, s.End = start, end
		return
	}
	s.Start, s.End = min(s.Start, start), max(s.End, end)
}

// Merge widens the span to cover o.
func (s *Span) Merge(o Span) {
	if o == (Span{}) {
		return
	}
	if *s == (Span{}) {
		*s = o
		return
	}
	s.Start, s.End = min(s.Start, o.Start), max(s.End, o.End)
}

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
