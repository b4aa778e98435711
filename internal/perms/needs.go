package perms

import (
	"fmt"
	"slices"
	"strings"
)

// Op is something stallwatch asks of the kernel that a permission can
// refuse.
type Op int

const (
	// Sample is on-CPU samples of the user's own processes.
	Sample Op = iota
	// SampleKernel is on-CPU samples with kernel frames.
	SampleKernel
	// SampleOffCPU is off-CPU samples: context switches, which happen in
	// the kernel.
	SampleOffCPU
	// SampleAny is sampling any user's processes (the daemon's).
	SampleAny
	// KernelNames is naming kernel functions (/proc/kallsyms addresses).
	KernelNames
	// StopThreads is stopping a thread to read its stack (ptrace).
	StopThreads
	// ReadOthers is reading another user's process: its /proc files
	// (maps, environ) and memory, which the kernel checks like a ptrace
	// attach.
	ReadOthers
	// KernelStacks is reading the kernel stacks of blocked threads.
	KernelStacks
	// DeletedFiles is reading a mapped file deleted or replaced on disk
	// (/proc/PID/map_files).
	DeletedFiles
	// PacketSocket is reading DogStatsD datagrams off the wire.
	PacketSocket
	// LockedMemory is perf rings past kernel.perf_event_mlock_kb.
	LockedMemory
	// ReceiveBuffer is a DogStatsD proxy's receive buffer past
	// net.core.rmem_max (SO_RCVBUFFORCE).
	ReceiveBuffer
	// ActAsGroup and ActAsUser are taking a JVM's group and user ids on
	// a thread of stallwatch's, to ask it through its attach mechanism.
	ActAsGroup
	ActAsUser
)

// Need is what one operation needs and what stallwatch does without it.
type Need struct {
	Op Op
	// What is the operation, as messages say it.
	What string
	// Cap grants it; so does CAP_SYS_ADMIN when AdminToo (perf events:
	// before Linux 5.8 there is no CAP_PERFMON).
	Cap      int
	AdminToo bool
	// Sysctl, when not "", is the kernel setting that allows it without
	// Cap for the user's own processes, at AtMost or below.
	Sysctl string
	AtMost int
	// Without is the flag that does without it; Lost what is lost then,
	// or, for an operation stallwatch goes on without, what is lost when
	// it is refused.
	Without, Lost string
	// Only names the setting that asks for it; "" when every capture may
	// (those are the capabilities of the README's setcap line).
	Only string
}

// Table is every operation a permission can refuse: preflight's checks,
// the errors of the code that meets a refusal and the README's setcap
// line are rendered from it, so that they say the same.
var Table = []Need{
	{Op: Sample, What: "on-CPU samples (perf_event_open)", Cap: CapPerfmon, AdminToo: true, Sysctl: "kernel.perf_event_paranoid", AtMost: 2},
	{Op: SampleKernel, What: "on-CPU samples with kernel frames (perf_event_open)", Cap: CapPerfmon, AdminToo: true, Sysctl: "kernel.perf_event_paranoid", AtMost: 1,
		Without: "--no-kernel", Lost: "user frames only"},
	{Op: SampleOffCPU, What: "off-CPU samples (perf_event_open on context switches, which happen in the kernel)", Cap: CapPerfmon, AdminToo: true,
		Sysctl: "kernel.perf_event_paranoid", AtMost: 1, Without: "--no-offcpu", Lost: "no off-CPU time"},
	{Op: SampleAny, What: "sampling other users' processes (perf_event_open)", Cap: CapPerfmon, AdminToo: true},
	{Op: KernelNames, What: "kernel function names (/proc/kallsyms hides its addresses)", Cap: CapSyslog, Sysctl: "kernel.kptr_restrict",
		Lost: "kernel frames show as [kernel]"},
	{Op: StopThreads, What: "stopping threads to read their stacks (ptrace)", Cap: CapSysPtrace, Sysctl: "kernel.yama.ptrace_scope",
		Without: "--no-ptrace", Lost: "the snapshot reads the stacks of blocked threads from /proc without a stop, running threads have none"},
	{Op: ReadOthers, What: "reading other users' processes' memory and stopping their threads (ptrace)", Cap: CapSysPtrace,
		Lost: "the snapshot has what /proc tells of each thread: no user stacks"},
	{Op: KernelStacks, What: "kernel stacks of blocked threads (/proc/<pid>/task/<tid>/stack)", Cap: CapSysAdmin,
		Lost: "the snapshot shows user stacks only"},
	{Op: DeletedFiles, What: "reading a mapped file deleted or replaced on disk (/proc/<pid>/map_files)", Cap: CapSysAdmin,
		Lost: "the file's symbols are missing"},
	{Op: PacketSocket, What: "reading DogStatsD datagrams off the wire (a packet socket, for --heartbeat-tap)", Cap: CapNetRaw,
		Only: "--heartbeat-tap"},
	{Op: LockedMemory, What: "locked memory for perf rings", Cap: CapIPCLock, Sysctl: "kernel.perf_event_mlock_kb",
		Only: "a target with more threads than kernel.perf_event_mlock_kb has rings for"},
	{Op: ReceiveBuffer, What: "a receive buffer past net.core.rmem_max (SO_RCVBUFFORCE)", Cap: CapNetAdmin, Sysctl: "net.core.rmem_max",
		Lost: "bursts may be dropped by the kernel (counted)", Only: "--heartbeat-statsd"},
	{Op: ActAsGroup, What: "acting as a JVM's group to ask it through its attach mechanism (setresgid)", Cap: CapSetgid,
		Lost: "its Java threads and names come from its memory alone", Only: "a JVM of another user"},
	{Op: ActAsUser, What: "acting as a JVM's user to ask it through its attach mechanism (setresuid)", Cap: CapSetuid,
		Lost: "its Java threads and names come from its memory alone", Only: "a JVM of another user"},
}

// Of is the table's row for op.
func Of(op Op) Need {
	for _, n := range Table {
		if n.Op == op {
			return n
		}
	}
	panic(fmt.Sprintf("perms: no need %d in the table", op))
}

// heldBy reports whether s holds what grants n.
func (n Need) heldBy(s Self) bool {
	return s.Has(n.Cap) || n.AdminToo && s.Has(CapSysAdmin)
}

// SetcapName is capability c as setcap(8) names it: "cap_perfmon".
func SetcapName(c int) string { return strings.ToLower(CapName(c)) }

// Setcap is the command that grants caps to the binary at exe, in one
// order whatever the order asked.
func Setcap(exe string, caps []int) string {
	names := make([]string, 0, len(caps))
	for _, c := range caps {
		if n := SetcapName(c); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return fmt.Sprintf("sudo setcap %s+ep %s", strings.Join(names, ","), exe)
}

// SetcapAll grants exe every capability every capture may use (the
// README's line): those of the rows no setting alone asks for.
func SetcapAll(exe string) string {
	var caps []int
	for _, n := range Table {
		if n.Only == "" {
			caps = append(caps, n.Cap)
		}
	}
	return Setcap(exe, caps)
}

// ownExe names stallwatch's binary in the commands of a fix.
const ownExe = "$(command -v stallwatch)"
