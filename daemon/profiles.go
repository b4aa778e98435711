package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Continuous profiling's host-wide budget (profileBudget): what the
// daemon may spend on its targets' continuous profiles, and the order in
// which it profiles less when they cost more, rather than fail.
const (
	// DefaultProfileCPU is the share of one core the daemon may use
	// while it profiles continuously (its whole CPU, captures aside).
	DefaultProfileCPU = 0.05
	// MinProfileFreq is the lowest rate the budget lowers a rate to,
	// about the OTel profiler's default (20 Hz).
	MinProfileFreq = 19
	// budgetWindow is how long the daemon's CPU is measured before the
	// budget acts; restoreAfter is how many windows in a row under half
	// the budget it waits before it profiles more again.
	budgetWindow = 30 * time.Second
	restoreAfter = 4
)

// Budget is the host-wide bound of continuous profiling: Config's
// ProfileCPU and ProfileFDs.
type Budget struct {
	// CPU is the share of one core the daemon's own CPU may take while
	// it profiles continuously (0: DefaultProfileCPU; negative: no
	// bound).
	CPU float64
	// FDs bounds the file descriptors the daemon holds (0: a quarter of
	// its RLIMIT_NOFILE hard limit; negative: no bound).
	FDs int
}

// The steps of degradation, in the order the budget takes them: first
// off-CPU sampling (each context switch a sample with a stack copy),
// then the rate, halved step by step down to MinProfileFreq, then
// targets, the one with the most threads first. Each step is one log line
// and a tag on every period it applies to (profile_degraded), with a note
// in the profile saying what and why.
type degradation struct {
	noOffCPU bool
	halvings int // the rate divided by 2^halvings (not below MinProfileFreq)
	dropped  int // targets no longer profiled
}

// profileBudget applies the Budget to the daemon's profiled targets.
type profileBudget struct {
	log    *slog.Logger
	budget Budget
	// cpu reads the daemon's CPU time (tests give their own).
	cpu func() time.Duration
	fds func() int

	step       degradation
	lastCPU    time.Duration
	lastAt     time.Time
	under      int
	drops      []int // pids dropped, the last dropped last
	overBefore bool
}

func newProfileBudget(b Budget, log *slog.Logger) *profileBudget {
	pb := &profileBudget{log: log, cpu: ownCPU, fds: ownFDs}
	pb.set(b)
	return pb
}

// set puts a new budget in force (a reload); the step in force stays
// until the next window says otherwise.
func (b *profileBudget) set(bd Budget) {
	if bd.CPU == 0 {
		bd.CPU = DefaultProfileCPU
	}
	if bd.FDs == 0 {
		var lim unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
			bd.FDs = int(min(lim.Max, 1<<30) / 4)
		}
	}
	b.budget = bd
}

// checkBudget judges the last window of the daemon's cost against the
// budget, and applies a changed step to every profiled target.
func (d *Daemon) checkBudget(now time.Time) {
	var ts []profiled
	for _, t := range d.targets {
		if p, ok := t.profiledInfo(); ok {
			ts = append(ts, p)
		}
	}
	captures := d.captures.Load()
	running, _ := d.lim.counts()
	captured := captures != d.budgetCaptures || running > 0
	d.budgetCaptures = captures
	if !d.budget.check(now, ts, captured) {
		return
	}
	for _, t := range d.targets {
		t.applyBudget(d.budget.step, d.budget.dropped(t.facts.PID), d.budget.budget)
	}
}

// ownCPU is the daemon's CPU time, user and system.
func ownCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ownFDs counts the daemon's open file descriptors.
func ownFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// profiled is what the budget sees of one profiled target.
type profiled struct {
	pid     int
	threads int
	freq    int  // its rule's rate
	offCPU  bool // its rule's off-CPU sampling
}

// check measures the last window and moves the degradation one step
// when the daemon is over its budget, or back one when it has been well
// under it for long enough. captured says a capture ran in the window:
// its cost is not continuous profiling's, and the window is not judged.
// It returns whether the step changed.
func (b *profileBudget) check(now time.Time, targets []profiled, captured bool) bool {
	cpu := b.cpu()
	if b.lastAt.IsZero() || len(targets) == 0 && b.step == (degradation{}) {
		b.lastCPU, b.lastAt = cpu, now
		return false
	}
	elapsed := now.Sub(b.lastAt)
	if elapsed < budgetWindow {
		return false
	}
	share := float64(cpu-b.lastCPU) / float64(elapsed)
	b.lastCPU, b.lastAt = cpu, now
	if captured {
		return false
	}
	fds := b.fds()
	overCPU := b.budget.CPU > 0 && share > b.budget.CPU
	overFDs := b.budget.FDs > 0 && fds > b.budget.FDs
	switch {
	case overCPU || overFDs:
		b.under = 0
		next, what, ok := b.degrade(targets, overFDs && !overCPU)
		if !ok {
			if !b.overBefore {
				b.log.Warn("continuous profiling is over the host's budget and cannot profile less", "cpu", pct(share), "cpu_budget", pct(b.budget.CPU), "fds", fds, "fd_budget", b.budget.FDs)
			}
			b.overBefore = true
			return false
		}
		b.overBefore = false
		b.step = next
		b.log.Warn("continuous profiling is over the host's budget: profiling less ("+what+")", "cpu", pct(share), "cpu_budget", pct(b.budget.CPU),
			"fds", fds, "fd_budget", b.budget.FDs, "now", b.step.String())
		return true
	case (b.budget.CPU <= 0 || share < b.budget.CPU/2) && (b.budget.FDs <= 0 || fds < b.budget.FDs/2) && b.step != (degradation{}):
		if b.under++; b.under < restoreAfter {
			return false
		}
		b.under = 0
		b.step = b.restore()
		b.log.Info("continuous profiling is well under the host's budget: profiling more again", "cpu", pct(share), "cpu_budget", pct(b.budget.CPU), "now", b.step.String())
		return true
	}
	b.under = 0
	return false
}

// degrade is the next step: off-CPU sampling first, then the rate, then
// targets (fdsOnly: descriptors, which only dropping targets frees).
func (b *profileBudget) degrade(targets []profiled, fdsOnly bool) (degradation, string, bool) {
	s := b.step
	kept := b.kept(targets)
	anyOffCPU := slices.ContainsFunc(kept, func(t profiled) bool { return t.offCPU })
	lowest := true
	for _, t := range kept {
		lowest = lowest && rateAt(t.freq, s.halvings) <= MinProfileFreq
	}
	switch {
	case !fdsOnly && !s.noOffCPU && anyOffCPU:
		s.noOffCPU = true
		return s, "no off-CPU samples in the periods", true
	case !fdsOnly && !lowest:
		s.halvings++
		return s, fmt.Sprintf("the rate halved: %s", rateText(kept, s.halvings)), true
	case len(kept) > 0:
		pid := mostThreads(kept)
		b.drops = append(b.drops, pid)
		s.dropped = len(b.drops)
		return s, fmt.Sprintf("pid %d, the target with the most threads, no longer profiled", pid), true
	}
	return s, "", false
}

// restore is the step before: targets back first (the last dropped
// first), then the rate, then off-CPU sampling.
func (b *profileBudget) restore() degradation {
	s := b.step
	switch {
	case len(b.drops) > 0:
		b.drops = b.drops[:len(b.drops)-1]
		s.dropped = len(b.drops)
	case s.halvings > 0:
		s.halvings--
	default:
		s.noOffCPU = false
	}
	return s
}

// kept are the targets the budget has not dropped.
func (b *profileBudget) kept(targets []profiled) []profiled {
	return slices.DeleteFunc(slices.Clone(targets), func(t profiled) bool { return slices.Contains(b.drops, t.pid) })
}

// dropped reports whether the budget dropped pid.
func (b *profileBudget) dropped(pid int) bool { return slices.Contains(b.drops, pid) }

// gone forgets a dropped target that is no longer watched.
func (b *profileBudget) gone(pid int) {
	b.drops = slices.DeleteFunc(b.drops, func(p int) bool { return p == pid })
	b.step.dropped = len(b.drops)
}

// mostThreads is the target with the most threads (the highest pid of
// those): it costs the most descriptors and samples.
func mostThreads(ts []profiled) int {
	best := ts[0]
	for _, t := range ts[1:] {
		if t.threads > best.threads || t.threads == best.threads && t.pid > best.pid {
			best = t
		}
	}
	return best.pid
}

// rateAt is a rule's rate after halvings.
func rateAt(freq, halvings int) int {
	if freq <= MinProfileFreq {
		return freq
	}
	return max(freq>>halvings, MinProfileFreq)
}

func rateText(targets []profiled, halvings int) string {
	seen := map[int]bool{}
	var parts []string
	for _, t := range targets {
		if !seen[t.freq] {
			seen[t.freq] = true
			parts = append(parts, fmt.Sprintf("%d Hz to %d Hz", t.freq, rateAt(t.freq, halvings)))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// mark is the profile_degraded tag's value and its note, for the
// targets still profiled ("": none).
func (s degradation) mark(freq int, budget Budget) (value, note string) {
	var what []string
	if s.noOffCPU {
		what = append(what, "no_offcpu")
	}
	if s.halvings > 0 && rateAt(freq, s.halvings) < freq {
		what = append(what, fmt.Sprintf("rate_%dhz", rateAt(freq, s.halvings)))
	}
	if len(what) == 0 {
		return "", ""
	}
	return strings.Join(what, "+"), fmt.Sprintf("the daemon profiles less to keep within its budget (%s of a core, %d descriptors): %s",
		pct(budget.CPU), budget.FDs, s.String())
}

func (s degradation) String() string {
	var parts []string
	if s.noOffCPU {
		parts = append(parts, "no off-CPU samples")
	}
	if s.halvings > 0 {
		parts = append(parts, fmt.Sprintf("rates halved %d times (not below %d Hz)", s.halvings, MinProfileFreq))
	}
	if s.dropped > 0 {
		parts = append(parts, fmt.Sprintf("%d targets not profiled", s.dropped))
	}
	if len(parts) == 0 {
		return "every target profiled as its rule says"
	}
	return strings.Join(parts, ", ")
}

func pct(f float64) string { return fmt.Sprintf("%.2f%%", 100*f) }
