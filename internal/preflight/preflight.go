// Package preflight checks, before a command starts its work, everything
// that would make it fail later or lose its first capture: that the
// target exists, that the machine allows the sampling rates asked for,
// that the output directory can be written, and that stallwatch may do
// what the settings ask of the kernel (perf_event_open with kernel frames
// and off-CPU, reading the target's memory, stopping its threads).
//
// It asks the kernel itself — a perf event opened and closed at once on
// the target, /proc files opened — rather than predicting from sysctls,
// and finds every problem in one pass: one error lists them all, each
// with its fix, and one set of fixes (a setcap, a sysctl, or flags that
// ask for less) grants everything at once. What stallwatch can do without
// (kernel function names, ptrace stops, kernel stacks of blocked threads)
// comes back as warnings, which the error lists too when there is one.
package preflight

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/kallsyms"
	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/sampler"
)

// Needs is what a command is about to do.
type Needs struct {
	// Verb names the work in messages: "record", "watch".
	Verb string
	// PID is the target; 0 when it is not running yet (watch -- CMD).
	// Permissions are then checked on stallwatch itself, whose user the
	// child will have.
	PID int
	// Rates are the sampling rates asked for, by flag.
	Rates []Rate
	// Sample: perf events will be opened, with Kernel frames and OffCPU
	// as asked.
	Sample, Kernel, OffCPU bool
	// Snapshot: threads will be snapshot, with ptrace stops when Ptrace.
	Snapshot, Ptrace bool
	// Out is the directory captures go under ("" when nothing is
	// written), named by OutFlag in messages.
	Out, OutFlag string
	// PacketSocket: a packet socket will be opened (the DogStatsD tap).
	PacketSocket bool
	// Caps are capabilities the work needs whatever the probes on
	// stallwatch's own process say (as setcap names them:
	// "cap_perfmon"): the daemon's targets are not known when it starts,
	// and belong to other users. Their absence fails the check: the
	// daemon runs unattended, and nobody would read a warning.
	Caps []string
}

// target is the process the process probes look at.
func (n *Needs) target() int { return n.PID }

// capNeeds says what each capability of Needs.Caps is for.
var capNeeds = map[string]struct {
	num  int
	what string
}{
	"cap_perfmon":    {perms.CapPerfmon, "sampling other users' processes (perf_event_open)"},
	"cap_sys_ptrace": {perms.CapSysPtrace, "reading other users' processes' memory and stopping their threads (ptrace)"},
	"cap_syslog":     {perms.CapSyslog, "kernel function names (/proc/kallsyms hides its addresses)"},
	"cap_net_raw":    {perms.CapNetRaw, "reading DogStatsD datagrams off the wire (a packet socket, for heartbeat-tap)"},
}

// Rate is a sampling rate and the flag that set it.
type Rate struct {
	Flag string // "--freq"
	Hz   int
}

// Kind says what a problem is.
type Kind int

const (
	// Setting: a value the user gave cannot work (exit 2).
	Setting Kind = iota
	// Permission: the kernel refuses what the settings ask (exit 3).
	Permission
	// Degraded: stallwatch goes on without it, and says so.
	Degraded
	// Unavailable: this kernel or machine lacks what is needed (exit 1).
	Unavailable
)

// Problem is one thing found.
type Problem struct {
	Kind Kind
	// What is what cannot be done: "on-CPU samples with kernel frames".
	What string
	// Why is the kernel's answer or the setting's conflict.
	Why string
	// Needs is what grants it (for Permission and Degraded).
	Needs string
	// Fix says how to fix a Setting; Permission problems share the fixes
	// of the Error.
	Fix string
	// Cap is the capability (lower case, for setcap) that grants it.
	Cap string
	// Without is the flag that asks for less and needs no permission.
	Without string
	// Paranoid is the kernel.perf_event_paranoid a perf problem needs (0
	// when a sysctl cannot fix it).
	Paranoid int
	// Effect is, for a Degraded problem, what is lost.
	Effect string
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.What)
	if p.Why != "" {
		b.WriteString(": " + p.Why)
	}
	if p.Needs != "" {
		b.WriteString("; needs " + p.Needs)
	}
	if p.Effect != "" {
		b.WriteString("; " + p.Effect)
	}
	if p.Fix != "" {
		b.WriteString("; " + p.Fix)
	}
	return b.String()
}

// NoProcessError is a target that is not there to work on.
type NoProcessError struct {
	PID    int
	Thread int  // PID is a thread of this process, not a process
	Zombie bool // it exited and its parent has not reaped it
}

func (e *NoProcessError) Error() string {
	switch {
	case e.Thread != 0:
		return fmt.Sprintf("pid %d is a thread of process %d: give the process, --pid %d", e.PID, e.Thread, e.Thread)
	case e.Zombie:
		return fmt.Sprintf("process %d has exited (a zombie its parent has not reaped): there is nothing left to sample", e.PID)
	}
	return fmt.Sprintf("no process %d", e.PID)
}

// Error is every problem found, with the fixes that grant all the missing
// permissions at once.
type Error struct {
	Verb     string
	PID      int
	Problems []Problem // Setting and Permission
	Warnings []Problem // Degraded, listed for the whole picture
	// Grant are the ways to grant every missing permission: a setcap, a
	// sysctl, running as root.
	Grant []string
	// Less is the flags that ask for less, when they avoid every refused
	// permission, with what they cost.
	Less string
	// anyTarget: the work is on processes not known yet (Needs.Caps).
	anyTarget bool
}

// NotPermitted reports whether a permission is missing.
func (e *Error) NotPermitted() bool { return e.has(Permission) }

// OnlySettings reports whether every problem is a setting the user can
// change.
func (e *Error) OnlySettings() bool {
	return !e.has(Permission) && !e.has(Unavailable)
}

func (e *Error) has(k Kind) bool {
	return slices.ContainsFunc(e.Problems, func(p Problem) bool { return p.Kind == k })
}

func (e *Error) Error() string {
	var b strings.Builder
	target := fmt.Sprintf(" pid %d", e.PID)
	switch {
	case e.PID == 0 && e.anyTarget:
		target = ""
	case e.PID == 0:
		target = " the command"
	}
	fmt.Fprintf(&b, "cannot %s%s as %s:", e.Verb, target, whoAmI())
	for _, p := range e.Problems {
		prefix := ""
		if p.Kind == Permission {
			prefix = "not permitted: "
		}
		b.WriteString("\n  " + prefix + p.String())
	}
	for _, p := range e.Warnings {
		b.WriteString("\n  also missing, stallwatch would go on without it: " + p.String())
	}
	if len(e.Grant) > 0 {
		b.WriteString("\nTo grant what is missing, one of:")
		for _, g := range e.Grant {
			b.WriteString("\n  " + g)
		}
	}
	if e.Less != "" {
		b.WriteString("\nOr ask for less: " + e.Less)
	}
	return b.String()
}

// whoAmI names the user stallwatch runs as.
func whoAmI() string {
	uid := os.Geteuid()
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("user %s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// CheckRates refuses the sampling rates above what the kernel allows now
// (kernel.perf_event_max_sample_rate, cpu-clock's 100 kHz): the settings
// part of Check, for a configuration read before it is used and again at
// each reload (daemon --check, SIGHUP), when no probe runs.
func CheckRates(verb string, rates []Rate) error {
	var f facts
	f.rateLimit, f.rateSysctl = sampler.FreqLimit()
	var problems []Problem
	for _, r := range rates {
		if r.Hz > f.rateLimit {
			problems = append(problems, rateProblem(r, f))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &Error{Verb: verb, Problems: problems, anyTarget: true}
}

// Check looks at everything n needs. It returns an error when the command
// cannot start: a *NoProcessError, or an *Error listing every problem.
// Otherwise the warnings are what will be missing; the command says them
// and goes on.
func Check(n Needs) (warnings []Problem, err error) {
	if n.PID != 0 {
		if err := checkProcess(n.PID); err != nil {
			return nil, err
		}
	}
	f := probe(n)
	problems, warnings := diagnose(n, f)
	if len(problems) == 0 {
		return warnings, nil
	}
	e := &Error{Verb: n.Verb, PID: n.PID, Problems: problems, Warnings: warnings, anyTarget: len(n.Caps) > 0}
	e.Grant, e.Less = fixes(n, f, problems, warnings)
	return nil, e
}

func checkProcess(pid int) error {
	st, err := procfs.ReadStatus(pid, pid)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, procfs.ErrGone):
		return &NoProcessError{PID: pid}
	case err != nil:
		return fmt.Errorf("pid %d: %w", pid, err)
	case st.Tgid != pid:
		return &NoProcessError{PID: pid, Thread: st.Tgid}
	case st.State == 'Z' || st.State == 'X':
		return &NoProcessError{PID: pid, Zombie: true}
	}
	return nil
}

// facts are what the probes found. Tests make them up.
type facts struct {
	probePID   int // the process the permission probes ran on
	ours       bool
	paranoid   int
	paranoidOK bool
	yama       int
	yamaOK     bool
	hasPerfmon bool // CAP_PERFMON or CAP_SYS_ADMIN

	rateLimit   int
	rateSysctl  bool
	perf        sampler.ProbeResult
	procErr     error // reading /proc/<pid>/maps
	memErr      error // reading the target's memory as a tracer (ptrace access)
	kallsymsHid bool
	kptr        int
	stackErr    error        // reading /proc/<pid>/task/<pid>/stack
	packetErr   error        // opening a packet socket
	caps        map[int]bool // capabilities in the effective set, for Needs.Caps
	outErr      error
}

func probe(n Needs) facts {
	f := facts{probePID: n.target()}
	if f.probePID == 0 {
		f.probePID = os.Getpid()
	}
	f.ours = owner(f.probePID) == os.Geteuid()
	f.paranoid, f.paranoidOK = perms.Paranoid()
	f.yama, f.yamaOK = perms.PtraceScope()
	f.hasPerfmon = perms.HasCap(perms.CapPerfmon) || perms.HasCap(perms.CapSysAdmin)
	f.rateLimit, f.rateSysctl = sampler.FreqLimit()
	pid := n.target()
	if pid != 0 {
		f.procErr = readSome(procfs.PidPath(pid, "maps"))
	}
	if n.Sample {
		freq := 0
		for _, r := range n.Rates {
			freq = max(freq, r.Hz)
		}
		f.perf = sampler.Probe(sampler.Config{PID: f.probePID, Freq: min(freq, f.rateLimit), Kernel: n.Kernel, OffCPU: n.OffCPU})
	}
	if n.Snapshot && n.Ptrace && pid != 0 && f.procErr == nil {
		f.memErr = ptraceAccess(pid)
	}
	if n.Kernel || n.Snapshot {
		f.kallsymsHid, f.kptr = kallsymsHidden()
	}
	if n.Snapshot && pid != 0 && f.procErr == nil {
		f.stackErr = readSome(procfs.TaskPath(pid, pid, "stack"))
	}
	if n.PacketSocket {
		f.packetErr = packetSocket()
	}
	if len(n.Caps) > 0 {
		f.caps = map[int]bool{}
		for _, c := range n.Caps {
			if cn, ok := capNeeds[c]; ok {
				f.caps[cn.num] = perms.HasCap(cn.num)
			}
		}
	}
	if n.Out != "" {
		f.outErr = checkOut(n.Out)
	}
	return f
}

// diagnose turns facts into problems and warnings.
func diagnose(n Needs, f facts) (problems, warnings []Problem) {
	for _, r := range n.Rates {
		if r.Hz > f.rateLimit {
			problems = append(problems, rateProblem(r, f))
		}
	}
	if f.outErr != nil {
		problems = append(problems, Problem{Kind: Setting, What: n.OutFlag + " " + n.Out, Why: f.outErr.Error(), Fix: outFix(f.outErr, n.OutFlag)})
	}
	if perms.IsPermission(f.procErr) {
		pid := n.target()
		p := Problem{
			Kind: Permission, What: fmt.Sprintf("reading pid %d's memory map (/proc/%d/maps)", pid, pid),
			Why: "permission denied", Needs: procNeeds(f), Cap: "cap_sys_ptrace",
		}
		if !n.Sample {
			// A snapshot still shows what /proc tells of each thread.
			p.Kind, p.Effect = Degraded, "the snapshot has what /proc tells of each thread: no user stacks"
			warnings = append(warnings, p)
		} else {
			problems = append(problems, p)
		}
	}
	problems = append(problems, perfProblems(n, f)...)
	if perms.IsPermission(f.memErr) {
		warnings = append(warnings, Problem{
			Kind: Degraded, What: "stopping threads to read their stacks (ptrace)", Needs: ptraceNeeds(f), Cap: "cap_sys_ptrace",
			Without: "--no-ptrace", Effect: "the snapshot reads the stacks of blocked threads from /proc without a stop, running threads have none",
		})
	}
	if f.kallsymsHid && n.Kernel {
		warnings = append(warnings, Problem{
			Kind: Degraded, What: "kernel function names", Why: "/proc/kallsyms hides its addresses",
			Needs: kallsymsNeeds(f), Cap: "cap_syslog",
			Effect: "kernel frames show as [kernel]",
		})
	}
	if perms.IsPermission(f.stackErr) {
		warnings = append(warnings, Problem{
			Kind: Degraded, What: "kernel stacks of blocked threads (/proc/<pid>/task/<tid>/stack)", Needs: "CAP_SYS_ADMIN", Cap: "cap_sys_admin",
			Effect: "the snapshot shows user stacks only",
		})
	}
	for _, c := range n.Caps {
		cn, known := capNeeds[c]
		if !known || f.hasCap(cn.num) || slices.ContainsFunc(problems, func(p Problem) bool { return p.Cap == c }) {
			continue
		}
		problems = append(problems, Problem{Kind: Permission, What: cn.what, Needs: strings.ToUpper(c), Cap: c})
	}
	if f.packetErr != nil && !slices.ContainsFunc(problems, func(p Problem) bool { return p.Cap == "cap_net_raw" }) {
		p := Problem{Kind: Unavailable, What: "reading DogStatsD datagrams off the wire (a packet socket, for --heartbeat-tap)", Why: errnoText(f.packetErr)}
		if perms.IsPermission(f.packetErr) {
			p.Kind, p.Needs, p.Cap = Permission, "CAP_NET_RAW", "cap_net_raw"
		}
		problems = append(problems, p)
	}
	// What the daemon may not do without is a problem, not a warning.
	var kept []Problem
	for _, w := range warnings {
		if !slices.ContainsFunc(problems, func(p Problem) bool { return p.Cap == w.Cap }) {
			kept = append(kept, w)
		}
	}
	return problems, kept
}

func (f *facts) hasCap(c int) bool { return f.caps[c] }

// packetSocket opens and closes a packet socket.
func packetSocket() error {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

func rateProblem(r Rate, f facts) Problem {
	p := Problem{Kind: Setting, What: fmt.Sprintf("%s %d", r.Flag, r.Hz)}
	if f.rateSysctl {
		p.Why = fmt.Sprintf("above kernel.perf_event_max_sample_rate (%d)", f.rateLimit)
		p.Fix = fmt.Sprintf("use %s %d or less, or raise the limit: `sudo sysctl kernel.perf_event_max_sample_rate=%d`", r.Flag, f.rateLimit, min(r.Hz, 100000))
		if r.Hz > 100000 {
			p.Fix = fmt.Sprintf("use %s %d or less (cpu-clock samples at most every 10 µs, 100000 Hz; raising kernel.perf_event_max_sample_rate to 100000 allows that much)", r.Flag, f.rateLimit)
		}
		return p
	}
	p.Why = fmt.Sprintf("above %d Hz, the most cpu-clock samples (one every 10 µs)", f.rateLimit)
	p.Fix = fmt.Sprintf("use %s %d or less", r.Flag, f.rateLimit)
	return p
}

// perfProblems explains refused perf events. The probes tell which events
// were refused and whether leaving kernel frames out would have helped.
func perfProblems(n Needs, f facts) []Problem {
	var ps []Problem
	r := f.perf
	if perms.IsPermission(r.OnCPU) {
		p := Problem{Kind: Permission, Why: errnoText(r.OnCPU), Cap: "cap_perfmon"}
		if n.Kernel && r.OnCPUUser == nil {
			p.What = "on-CPU samples with kernel frames (perf_event_open)"
			p.Needs, p.Paranoid = perfNeeds(f, 1), 1
			p.Without = "--no-kernel"
		} else {
			p.What = "on-CPU samples (perf_event_open)"
			p.Needs, p.Paranoid = perfNeeds(f, 2), 2
		}
		if !f.ours {
			p.Paranoid = 0
		}
		ps = append(ps, p)
	} else if r.OnCPU != nil {
		ps = append(ps, Problem{Kind: Unavailable, What: "on-CPU samples (perf_event_open)", Why: r.OnCPU.Error(),
			Fix: "this kernel or machine lacks the event (is perf_event enabled in this kernel?)"})
	}
	if perms.IsPermission(r.OffCPU) {
		p := Problem{Kind: Permission, What: "off-CPU samples (perf_event_open on context switches, which happen in the kernel)",
			Why: errnoText(r.OffCPU), Needs: perfNeeds(f, 1), Cap: "cap_perfmon", Without: "--no-offcpu", Paranoid: 1}
		if !f.ours {
			p.Paranoid = 0
		}
		ps = append(ps, p)
	} else if r.OffCPU != nil {
		ps = append(ps, Problem{Kind: Unavailable, What: "off-CPU samples (perf_event_open on context switches)", Why: r.OffCPU.Error(),
			Fix: "this kernel lacks the event; add --no-offcpu"})
	}
	return ps
}

func errnoText(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

func perfNeeds(f facts, paranoid int) string {
	switch {
	case f.hasPerfmon:
		return "permission from a security module or seccomp filter (CAP_PERFMON is present): check the container's seccomp profile and SELinux/AppArmor policy for perf_event_open"
	case !f.ours:
		return fmt.Sprintf("CAP_PERFMON (pid %d belongs to another user)", f.probePID)
	case f.paranoidOK:
		return fmt.Sprintf("CAP_PERFMON, or kernel.perf_event_paranoid <= %d (it is %d)", paranoid, f.paranoid)
	}
	return "CAP_PERFMON (kernel.perf_event_paranoid is unreadable: is perf_event enabled in this kernel?)"
}

// kallsymsNeeds: with kptr_restrict 0 the kernel shows the addresses to
// whoever may profile the kernel (perf_event_paranoid <= 1); at 1, to
// CAP_SYSLOG only; at 2, to nobody.
func kallsymsNeeds(f facts) string {
	switch f.kptr {
	case 0:
		return "CAP_SYSLOG, or kernel.perf_event_paranoid <= 1 (kernel.kptr_restrict is 0)"
	case 1:
		return "CAP_SYSLOG (kernel.kptr_restrict is 1)"
	}
	return fmt.Sprintf("kernel.kptr_restrict <= 1 and CAP_SYSLOG (kernel.kptr_restrict is %d hides them from everyone)", f.kptr)
}

func ptraceNeeds(f facts) string {
	switch {
	case !f.ours:
		return "CAP_SYS_PTRACE (the target belongs to another user)"
	case f.yamaOK && f.yama > 0:
		return fmt.Sprintf("CAP_SYS_PTRACE (Yama kernel.yama.ptrace_scope is %d)", f.yama)
	}
	return "CAP_SYS_PTRACE"
}

func procNeeds(f facts) string {
	if !f.ours {
		return "CAP_SYS_PTRACE (the target belongs to another user), or running as its user"
	}
	return "CAP_SYS_PTRACE (the target is not dumpable, or Yama restricts access)"
}

// fixes composes the ways to grant every missing permission, and the flags
// that ask for less when they avoid every refusal.
func fixes(n Needs, f facts, problems, warnings []Problem) (grant []string, less string) {
	var caps []string
	paranoid := 3
	sysctlHelps := true
	var without []string
	everyAvoidable := true
	for _, p := range problems {
		if p.Kind != Permission {
			continue
		}
		if p.Cap != "" && !slices.Contains(caps, p.Cap) {
			caps = append(caps, p.Cap)
		}
		if p.Paranoid == 0 {
			sysctlHelps = false
		} else {
			paranoid = min(paranoid, p.Paranoid)
		}
		if p.Without == "" {
			everyAvoidable = false
		} else if !slices.Contains(without, p.Without) {
			without = append(without, p.Without)
		}
	}
	if len(caps) == 0 {
		return nil, ""
	}
	// One setcap grants everything, what stallwatch could do without
	// included, so that nothing is found missing next.
	for _, w := range warnings {
		if w.Cap != "" && !slices.Contains(caps, w.Cap) {
			caps = append(caps, w.Cap)
		}
	}
	slices.Sort(caps)
	exe, err := os.Executable()
	if err != nil {
		exe = "$(command -v stallwatch)"
	}
	grant = append(grant, fmt.Sprintf("sudo setcap %s+ep %s", strings.Join(caps, ","), exe))
	if sysctlHelps && f.paranoidOK && paranoid < f.paranoid && !f.hasPerfmon {
		grant = append(grant, fmt.Sprintf("sudo sysctl kernel.perf_event_paranoid=%d", paranoid))
	}
	grant = append(grant, "run stallwatch as root (sudo)")
	if everyAvoidable {
		less = strings.Join(without, " ")
		var cost []string
		if slices.Contains(without, "--no-kernel") {
			cost = append(cost, "user frames only")
		}
		if slices.Contains(without, "--no-offcpu") {
			cost = append(cost, "no off-CPU time")
		}
		if len(cost) > 0 {
			less += " (" + strings.Join(cost, ", ") + ")"
		}
	}
	return grant, less
}

// owner is the uid that owns process pid (-1 when unknown).
func owner(pid int) int {
	var st unix.Stat_t
	if unix.Stat(procfs.PidPath(pid), &st) != nil {
		return -1
	}
	return int(st.Uid)
}

func readSome(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [64]byte
	if _, err := f.Read(b[:]); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// ptraceAccess asks the kernel whether stallwatch may read pid's memory
// as its tracer may: process_vm_readv takes the access that attaching
// takes (PTRACE_MODE_ATTACH). Opening /proc/PID/mem would ask more: a file
// owned by the target's user, which CAP_SYS_PTRACE alone may not open.
// Only a refusal is an error; a byte that cannot be read is not.
func ptraceAccess(pid int) error {
	maps, err := procfs.ReadMaps(pid)
	if err != nil {
		return err
	}
	for _, m := range maps {
		if len(m.Perms) == 0 || m.Perms[0] != 'r' {
			continue
		}
		var b [1]byte
		local := []unix.Iovec{{Base: &b[0], Len: 1}}
		remote := []unix.RemoteIovec{{Base: uintptr(m.Start), Len: 1}}
		if _, err := unix.ProcessVMReadv(pid, local, remote, 0); errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return err
		}
		return nil
	}
	return nil
}

// kallsymsHidden reports whether /proc/kallsyms shows its addresses as
// zero, and kernel.kptr_restrict, which says who may see them.
func kallsymsHidden() (bool, int) {
	kptr, _ := procfs.Sysctl("kernel.kptr_restrict")
	return kallsyms.AddressesHidden(), kptr
}

// checkOut checks that captures can be written under dir by doing what a
// capture will do, once, and undoing it: a private directory made (and
// removed) in dir, which must be one stallwatch trusts (internal/safedir),
// or, when dir does not exist yet, in its nearest existing parent. Access
// checks alone would pass for root on /proc, /sys or a full disk's quota.
func checkOut(dir string) error {
	path := filepath.Clean(dir)
	st, err := os.Stat(path)
	switch {
	case err == nil && !st.IsDir():
		return errors.New("it is a file, not a directory")
	case err == nil:
		d, err := safedir.Open(path)
		if err != nil {
			return err
		}
		defer d.Close()
		return tryWrite(d)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	parent := filepath.Dir(path)
	for {
		st, err := os.Stat(parent)
		if errors.Is(err, fs.ErrNotExist) && parent != filepath.Dir(parent) {
			parent = filepath.Dir(parent)
			continue
		}
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("%s is a file, not a directory", parent)
		}
		// The directories above --out are the operator's: safedir
		// checks only the one it writes in, which it will make.
		d, err := safedir.OpenForRead(parent)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := tryWrite(d); err != nil {
			return fmt.Errorf("it does not exist, and cannot be made in %s: %w", parent, err)
		}
		return nil
	}
}

// tryWrite makes a directory in d and removes it.
func tryWrite(d *safedir.Dir) error {
	name, sub, err := d.MkdirTemp(".stallwatch-check-", 0o700)
	if err != nil {
		switch {
		case errors.Is(err, unix.EROFS):
			return errors.New("on a read-only file system")
		case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
			return fmt.Errorf("%s may not write there", whoAmI())
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
			return errors.New("no space left (or the quota is used up)")
		case errors.Is(err, unix.ENOENT):
			return errors.New("the file system there does not hold directories (/proc, /sys?)")
		}
		return err
	}
	sub.Close()
	return d.RemoveAll(name)
}

func outFix(err error, flag string) string {
	var ue *safedir.UnsafeError
	if errors.As(err, &ue) {
		return "" // its message says how
	}
	return fmt.Sprintf("give %s a directory stallwatch can write", flag)
}
