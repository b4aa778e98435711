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
	// AnyProcess are operations the work does on processes of any
	// user, whatever the probes on stallwatch's own process say: the
	// daemon's targets are not known when it starts, and belong to other
	// users. A capability missing for one fails the check: the daemon
	// runs unattended, and nobody would read a warning.
	AnyProcess []perms.Op
}

// target is the process the process probes look at.
func (n *Needs) target() int { return n.PID }

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
	// Cap is the capability that grants it (perms.CapPerfmon…); 0 when
	// none does.
	Cap int
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
	// anyTarget: the work is on processes not known yet
	// (Needs.AnyProcess).
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
	e := &Error{Verb: n.Verb, PID: n.PID, Problems: problems, Warnings: warnings, anyTarget: len(n.AnyProcess) > 0}
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
	self       perms.Self // what stallwatch's own process holds

	rateLimit   int
	rateSysctl  bool
	perf        sampler.ProbeResult
	procErr     error // reading /proc/<pid>/maps
	memErr      error // reading the target's memory as a tracer (ptrace access)
	kallsymsHid bool
	kptr        int
	stackErr    error // reading /proc/<pid>/task/<pid>/stack
	packetErr   error // opening a packet socket
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
	f.self = perms.ReadSelf()
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
			Why: "permission denied", Needs: procNeeds(f), Cap: perms.CapSysPtrace,
		}
		if !n.Sample {
			// A snapshot still shows what /proc tells of each thread.
			p.Kind, p.Effect = Degraded, perms.Of(perms.ReadOthers).Lost
			warnings = append(warnings, p)
		} else {
			problems = append(problems, p)
		}
	}
	problems = append(problems, perfProblems(n, f)...)
	if perms.IsPermission(f.memErr) {
		warnings = append(warnings, degraded(perms.StopThreads, "", ptraceNeeds(f)))
	}
	if f.kallsymsHid && n.Kernel {
		kn := perms.Of(perms.KernelNames)
		warnings = append(warnings, degraded(perms.KernelNames, "", kn.Missing(f.self, perms.Setting{V: f.kptr, Known: true})))
	}
	if perms.IsPermission(f.stackErr) {
		warnings = append(warnings, degraded(perms.KernelStacks, "", perms.Of(perms.KernelStacks).Missing(f.self, perms.Setting{})))
	}
	for _, op := range n.AnyProcess {
		need := perms.Of(op)
		if f.self.Has(need.Cap) || slices.ContainsFunc(problems, func(p Problem) bool { return p.Cap == need.Cap }) {
			continue
		}
		problems = append(problems, Problem{Kind: Permission, What: need.What, Needs: need.Missing(f.self, perms.Setting{}), Cap: need.Cap})
	}
	if f.packetErr != nil && !slices.ContainsFunc(problems, func(p Problem) bool { return p.Cap == perms.CapNetRaw }) {
		need := perms.Of(perms.PacketSocket)
		p := Problem{Kind: Unavailable, What: need.What, Why: errnoText(f.packetErr)}
		if perms.IsPermission(f.packetErr) {
			p.Kind, p.Needs, p.Cap = Permission, need.Missing(f.self, perms.Setting{}), need.Cap
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

// degraded is a problem stallwatch goes on without: op's, as the table
// says it, needing needs (why is the kernel's answer, when said).
func degraded(op perms.Op, why, needs string) Problem {
	n := perms.Of(op)
	return Problem{Kind: Degraded, What: n.What, Why: why, Needs: needs, Cap: n.Cap, Without: n.Without, Effect: n.Lost}
}

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
		op := perms.Sample
		if n.Kernel && r.OnCPUUser == nil {
			op = perms.SampleKernel
		}
		p := perfProblem(op, r.OnCPU, f)
		if !f.ours {
			p.Paranoid = 0
		}
		ps = append(ps, p)
	} else if r.OnCPU != nil {
		ps = append(ps, Problem{Kind: Unavailable, What: "on-CPU samples (perf_event_open)", Why: r.OnCPU.Error(),
			Fix: "this kernel or machine lacks the event (is perf_event enabled in this kernel?)"})
	}
	if perms.IsPermission(r.OffCPU) {
		p := perfProblem(perms.SampleOffCPU, r.OffCPU, f)
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

// perfProblem is a refused perf event of op's.
func perfProblem(op perms.Op, err error, f facts) Problem {
	n := perms.Of(op)
	return Problem{Kind: Permission, What: n.What, Why: errnoText(err), Needs: perfNeeds(f, n), Cap: n.Cap,
		Without: n.Without, Paranoid: n.AtMost}
}

func perfNeeds(f facts, n perms.Need) string {
	if !f.ours && !f.self.Root && !f.self.Has(n.Cap) {
		return fmt.Sprintf("%s (pid %d belongs to another user)", perms.CapName(n.Cap), f.probePID)
	}
	return n.Missing(f.self, perms.Setting{V: f.paranoid, Known: f.paranoidOK})
}

func ptraceNeeds(f facts) string {
	if !f.ours && !f.self.Root && !f.self.Has(perms.CapSysPtrace) {
		return perms.OtherUsers
	}
	return perms.Of(perms.StopThreads).Missing(f.self, perms.Setting{V: f.yama, Known: f.yamaOK})
}

func procNeeds(f facts) string {
	switch {
	case f.self.Root || f.self.Has(perms.CapSysPtrace):
		return perms.Of(perms.ReadOthers).Missing(f.self, perms.Setting{})
	case !f.ours:
		return perms.OtherUsers + ", or running as its user"
	}
	return "CAP_SYS_PTRACE (the target is not dumpable, or Yama restricts access)"
}

// fixes composes the ways to grant every missing permission, and the flags
// that ask for less when they avoid every refusal. Root, or a process
// that holds a capability, is never told to run as root: its problems
// say why that was not enough.
func fixes(n Needs, f facts, problems, warnings []Problem) (grant []string, less string) {
	var caps []int
	paranoid := 3
	sysctlHelps := true
	var without []string
	everyAvoidable := true
	for _, p := range problems {
		if p.Kind != Permission {
			continue
		}
		if p.Cap != 0 && !slices.Contains(caps, p.Cap) {
			caps = append(caps, p.Cap)
		}
		if p.Paranoid == 0 || !f.ours {
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
	// One grant gives everything, what stallwatch could do without
	// included, so that nothing is found missing next.
	for _, w := range warnings {
		if w.Cap != 0 && !slices.Contains(caps, w.Cap) {
			caps = append(caps, w.Cap)
		}
	}
	grant = grants(f, caps, sysctlHelps && f.paranoidOK && paranoid < f.paranoid, paranoid)
	if everyAvoidable {
		less = strings.Join(without, " ")
		var cost []string
		for _, op := range []perms.Op{perms.SampleKernel, perms.SampleOffCPU} {
			if need := perms.Of(op); slices.Contains(without, need.Without) {
				cost = append(cost, need.Lost)
			}
		}
		if len(cost) > 0 {
			less += " (" + strings.Join(cost, ", ") + ")"
		}
	}
	return grant, less
}

// grants are the ways to grant caps to this process: a setcap, the
// sysctl that allows the perf events instead (when sysctl), and root —
// for a process that may be granted them; the container or unit for
// one whose bounding set lacks them; nothing for one that holds them
// (a policy refused it, which its problems name).
func grants(f facts, caps []int, sysctl bool, paranoid int) []string {
	var settable, dropped []int
	for _, c := range caps {
		switch {
		case f.self.Has(c):
		case f.self.Root || !f.self.CanGrant(c):
			dropped = append(dropped, c)
		default:
			settable = append(settable, c)
		}
	}
	var grant []string
	if len(settable) > 0 {
		exe, err := os.Executable()
		if err != nil {
			exe = "$(command -v stallwatch)"
		}
		grant = append(grant, perms.Setcap(exe, settable))
		if sysctl && !f.self.Root {
			grant = append(grant, fmt.Sprintf("sudo sysctl kernel.perf_event_paranoid=%d", paranoid))
		}
		if !f.self.Root {
			grant = append(grant, "run stallwatch as root (sudo)")
		}
	}
	if len(dropped) > 0 {
		names := make([]string, len(dropped))
		for i, c := range dropped {
			names[i] = perms.CapName(c)
		}
		slices.Sort(names)
		grant = append(grant, fmt.Sprintf("give stallwatch %s where it runs: its container or unit dropped them (docker run --cap-add, a pod's securityContext.capabilities.add, systemd AmbientCapabilities=)", strings.Join(names, ", ")))
	}
	return grant
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
