package model

import "time"

// Schema is the version of capture.json's layout; it grows when a field
// changes meaning, not when one is added.
const Schema = 1

// Info is capture.json: the facts of one capture. The package doc
// describes each field as it appears in the file.
type Info struct {
	Schema  int    `json:"schema"`
	Version string `json:"stallwatch_version"`

	Trigger   TriggerKind `json:"trigger"`             // "stall" | "signal" | "manual"
	Reason    string      `json:"reason,omitempty"`    // "no heartbeat for 10.2s"
	Heartbeat string      `json:"heartbeat,omitempty"` // "file /run/app.beat"
	Seq       int         `json:"seq,omitempty"`       // 2 and up: a recapture of a stall that lasts

	PID        int      `json:"pid"`
	Command    []string `json:"command,omitempty"`
	Executable string   `json:"executable,omitempty"`
	Kernel     string   `json:"kernel,omitempty"` // uname -r
	Hostname   string   `json:"hostname,omitempty"`
	// Host is the machine's load when the capture was written, so that a
	// reader can tell a starved process from a starved host.
	Host *Host `json:"host,omitempty"`
	// KernelContext is the process's kernel context over the capture's
	// window (the trigger, or the recording's start, to its end): its
	// cgroups, their CPU throttling, PSI, the host's steal and iowait,
	// reclaim, disks, OOM kills, its threads' faults and switches.
	// KernelBefore is the same over the flight recorder's history before
	// the trigger (without threads), where there is one.
	KernelContext *KernelContext `json:"kernel_context,omitempty"`
	KernelBefore  *KernelContext `json:"kernel_context_before,omitempty"`

	Start     time.Time     `json:"start,omitzero"`            // of the sampled window, history included
	TriggerAt time.Time     `json:"trigger_at,omitzero"`       // when the capture was asked for
	End       time.Time     `json:"end,omitzero"`              // of the sampled window
	LastBeat  time.Time     `json:"last_beat,omitzero"`        // the last heartbeat before the stall
	Recovered time.Time     `json:"recovered,omitzero"`        // the first heartbeat after it
	StallFor  time.Duration `json:"stall_ns,omitempty"`        // heartbeat silence at the trigger
	StallLen  time.Duration `json:"stall_length_ns,omitempty"` // whole stall, last beat to recovery

	CutShort     bool   `json:"cut_short"`
	CutShortWhy  string `json:"cut_short_why,omitempty"`
	TargetExited bool   `json:"target_exited"`

	Counts   Counts   `json:"counts"`
	Settings Settings `json:"settings"`
	// StackCopyGrown are the threads whose stack copies grew past
	// Settings.StackCopy as their stacks needed, and to what.
	StackCopyGrown []ThreadStackCopy `json:"stack_copy_grown,omitempty"`
	// Runtime is the language runtime the process runs, as the findings
	// recognised it ("jvm", "go", "node" …: package runtimes' IDs); ""
	// when none they know.
	Runtime string `json:"runtime,omitempty"`
	// Profile says where the target's continuous profile is, when it
	// has one: the periods before the trigger, to compare with.
	Profile *ContinuousProfile `json:"continuous_profile,omitempty"`
	// Findings are what the report's first screen says, most severe
	// first, as data for alerts and hooks.
	Findings []Finding `json:"findings,omitempty"`
	Notes    []string  `json:"notes,omitempty"`
	// Files lists the capture directory's files; Root.Write fills it.
	Files []string `json:"files"`
}

// ContinuousProfile is where a target's continuous profile goes: its
// period files, and whether they are uploaded too (to Datadog's
// profiler, beside the capture: the same service, host and process_id).
type ContinuousProfile struct {
	Dir      string        `json:"dir"` // OUT/profiles/PID-PROCESS
	Period   time.Duration `json:"period_ns"`
	Since    time.Time     `json:"since"` // when the first period began
	Uploaded bool          `json:"uploaded"`
}

// Counts are what was collected and what was lost, never hidden.
type Counts struct {
	Samples           int    `json:"samples"`          // on-CPU samples
	OffCPU            int    `json:"offcpu_intervals"` // off-CPU intervals
	SamplesBefore     int    `json:"samples_before"`   // of Samples+OffCPU, from the flight recorder
	Lost              uint64 `json:"lost_records"`     // perf records the kernel dropped
	LostSamples       uint64 `json:"lost_samples"`
	Throttled         uint64 `json:"throttled"`
	Threads           int    `json:"threads"`
	UnreadableThreads int    `json:"unreadable_threads"`
	// UnsampledThreads were left out of sampling for want of file
	// descriptors (RLIMIT_NOFILE); a note says which rule chose the rest.
	UnsampledThreads int `json:"unsampled_threads,omitempty"`
	JITSources       int `json:"jit_sources"`     // jitdumps and perf maps read
	JITTruncated     int `json:"jit_truncated"`   // of them, cut off mid-record
	MissingSymbols   int `json:"missing_symbols"` // mappings no symbol source could name
}

// Settings are the capture's parameters, so that a reader knows what the
// numbers mean.
type Settings struct {
	Freq         int           `json:"freq_hz,omitempty"`
	BaselineFreq int           `json:"baseline_freq_hz,omitempty"`
	History      time.Duration `json:"history_ns,omitempty"`
	CaptureFor   time.Duration `json:"capture_for_ns,omitempty"`
	OffCPU       bool          `json:"offcpu"`
	Kernel       bool          `json:"kernel"`
	Ptrace       bool          `json:"ptrace"`
	// Unwind is how sampled user stacks were walked ("cfi", "fp");
	// StackCopy the bytes of user stack each sample copied for it, at
	// first. StackCopyMax, when set, is the ceiling the copies of each
	// thread grew to as its stacks needed (no --stack-copy given);
	// Info.StackCopyGrown lists the threads whose copies grew.
	Unwind       string `json:"unwind,omitempty"`
	StackCopy    int    `json:"stack_copy_bytes,omitempty"`
	StackCopyMax int    `json:"stack_copy_max_bytes,omitempty"`
}

// ThreadStackCopy is the stack copy a thread's samples grew to.
type ThreadStackCopy struct {
	TID   int    `json:"tid"`
	Name  string `json:"name,omitempty"`
	Bytes int    `json:"bytes"`
}

// Host is the load of the machine a capture was taken on.
type Host struct {
	CPUs int `json:"cpus"` // online CPUs
	// Load1, Load5 and Load15 are /proc/loadavg's averages of runnable
	// and uninterruptible tasks; Running is how many ran or were ready
	// to at that moment, Tasks how many there were.
	Load1   float64 `json:"load1"`
	Load5   float64 `json:"load5"`
	Load15  float64 `json:"load15"`
	Running int     `json:"running"`
	Tasks   int     `json:"tasks"`
}

// Finding is one conclusion the report draws, as data.
type Finding struct {
	Kind     FindingKind `json:"kind"`
	Severity Severity    `json:"severity"`
	// Summary is the finding in one line, as the report says it.
	Summary string `json:"summary"`
	// Detail explains it: the numbers behind it, and what to do.
	Detail string `json:"detail,omitempty"`
	// TIDs are the threads it names, the most important first.
	TIDs []int `json:"tids,omitempty"`
	// Functions are the functions it names, the most telling first.
	Functions []string `json:"functions,omitempty"`
	// Runtime names the language runtime a runtime finding is about
	// ("jvm", "go", "node", "python", "dotnet", "julia": package
	// runtimes' IDs).
	Runtime string `json:"runtime,omitempty"`
}

// FindingKind names what was found. Readers must accept kinds they do
// not know: new ones are added without a schema change.
type FindingKind string

const (
	// The process is stopped (SIGSTOP, SIGTSTP) or held by a debugger
	// (TIDs: the stopped threads; the tracer is named in Detail).
	FindingStopped FindingKind = "stopped"
	// Threads wait for each other in a cycle (TIDs: the cycle).
	FindingDeadlock FindingKind = "deadlock"
	// A language runtime stopped its threads: a JVM safepoint, a Go
	// stop-the-world, a .NET suspension, a Julia GC waiting for a thread
	// that does not reach a safepoint (TIDs: the thread that holds the
	// pause up first, when known, then the collector). Runtime says
	// which.
	FindingRuntimePause FindingKind = "runtime_pause"
	// A Node.js event loop did not return to poll: one JavaScript
	// function ran for most of the window (Functions: it).
	FindingEventLoopBlocked FindingKind = "event_loop_blocked"
	// CPython threads waited for the GIL while one thread held it
	// (TIDs: the holder first).
	FindingGIL FindingKind = "gil_contention"
	// Many threads wait for a lock one thread holds (TIDs: the owner
	// first).
	FindingLockConvoy FindingKind = "lock_convoy"
	// Threads in uninterruptible sleep (D state), usually I/O
	// (Functions: the kernel functions they wait in).
	FindingUninterruptible FindingKind = "uninterruptible"
	// Threads were runnable but waited for a CPU for a large share of
	// the window.
	FindingCPUStarvation FindingKind = "cpu_starvation"
	// One thread spun on a CPU while others waited.
	FindingSpinning FindingKind = "spinning"
	// One thread used most of the CPU time.
	FindingHotThread FindingKind = "hot_thread"
	// Samples fell in JIT-compiled code no symbol file names: the runtime
	// was started without its switch (Detail names it).
	FindingMissingJITSymbols FindingKind = "missing_jit_symbols"
	// No thread ran: the process waits, it is not busy.
	FindingAllWaiting FindingKind = "all_waiting"
	// The process's cgroup, or one above it, used its CPU quota up in a
	// large share of the window's periods (TIDs: the threads that burn
	// it, then those held).
	FindingCPUThrottled FindingKind = "cpu_throttled"
	// The hypervisor took a large share of the machine's CPU time
	// (steal) while the process wanted it.
	FindingCPUSteal FindingKind = "cpu_steal"
	// Threads waited for memory in the kernel: direct or cgroup-limit
	// reclaim, compaction, swap-in, writeback throttling, pages faulted
	// back after reclaim (Functions: the kernel functions).
	FindingMemoryPressure FindingKind = "memory_pressure"
	// Threads blocked on I/O, with the files and devices they wait on
	// (Functions: the kernel function).
	FindingIOPressure FindingKind = "io_pressure"
	// The OOM killer killed in the process's memory cgroup (critical) or
	// on the host (info) during the window.
	FindingOOMKill FindingKind = "oom_kill"
	// Threads blocked on a descriptor whose other end is another
	// process: a socket's peer, a pipe's reader or writer (TIDs: the
	// threads; Detail names the peer by pid and its state).
	FindingBlockedOnPeer FindingKind = "blocked_on_peer"
)

// Severity ranks findings.
type Severity string

const (
	SeverityCritical Severity = "critical" // the likely cause of a stall
	SeverityWarning  Severity = "warning"
	SeverityInfo     Severity = "info"
)

// Rank orders severities: lower is more severe; unknown ones last.
func (s Severity) Rank() int {
	switch s {
	case SeverityCritical:
		return 0
	case SeverityWarning:
		return 1
	case SeverityInfo:
		return 2
	}
	return 3
}

// Target is what is known of the captured process, read while it lived.
type Target struct {
	PID        int
	Command    []string
	Executable string
}
