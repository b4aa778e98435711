package sampler

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Descriptor planning: see the package doc, "Descriptors".

// ErrOverBudget is why a thread is not sampled when the descriptor plan
// (Config.MaxThreads) has no room for it. It is counted
// (Stats.ThreadsOverBudget), not fatal.
var ErrOverBudget = errors.New("not sampled: the file descriptor plan has no room for it (RLIMIT_NOFILE)")

// IsDescriptorShortage reports whether err is a sampler running out of
// file descriptors: the plan's bound or the kernel's EMFILE.
func IsDescriptorShortage(err error) bool {
	return errors.Is(err, ErrOverBudget) || errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE)
}

// DefaultFDHeadroom is what a plan leaves for the descriptors a capture
// opens besides perf events: the capture directory's files, /proc files
// of the snapshot, symbol files opened at a capture, the heartbeat's
// sockets.
const DefaultFDHeadroom = 256

// MinFDHeadroom is the least a plan leaves, however small the limit: what
// writing one capture holds open at once (the output directory and its
// temporary one, a file being written, the snapshot's /proc files, a
// symbol file, the heartbeat). Threads get no descriptor that would cut
// into it — a capture without samples is better than none.
const MinFDHeadroom = 32

// samplerFDs are the sampler's own descriptors: epoll, eventfd, pidfd.
const samplerFDs = 3

// FDPlan is how the threads of a target fit into the file descriptors
// stallwatch may open: per-thread perf events against RLIMIT_NOFILE.
type FDPlan struct {
	Threads   int    // the target's threads when planned
	Limit     uint64 // RLIMIT_NOFILE's soft limit, raised to the hard one
	HardLimit uint64
	InUse     int // descriptors already open (symbol files, sockets …)
	Headroom  int // left for what a capture opens besides perf events
	// Want is the events per thread the settings ask for: 3 with
	// off-CPU sampling, else 2. PerThread is what the plan gives.
	Want, PerThread int
	// FoldTracker: no tracker event; FORK, EXIT and COMM records come
	// in the on-CPU event's ring (Config.FoldTracker).
	FoldTracker bool
	// OffCPU is whether off-CPU sampling fits; DroppedOffCPU whether the
	// settings asked for it and the plan dropped it.
	OffCPU, DroppedOffCPU bool
	// MaxThreads is how many threads fit at PerThread: the sampler's
	// Config.MaxThreads. Fewer than Threads means a subset is sampled.
	MaxThreads int
}

// Budget is the descriptors the plan has for per-thread events.
func (p FDPlan) Budget() int {
	return max(int(min(p.Limit, 1<<31))-p.InUse-p.Headroom-samplerFDs, 0)
}

// Need is the descriptors sampling every thread as asked would take, in
// all (what the limit must be at least).
func (p FDPlan) Need() int { return p.Threads*p.Want + p.InUse + p.Headroom + samplerFDs }

// Degraded reports whether the plan gives less than the settings ask.
func (p FDPlan) Degraded() bool { return p.PerThread < p.Want || p.Subset() }

// Subset reports whether only some of the threads are sampled.
func (p FDPlan) Subset() bool { return p.MaxThreads < p.Threads }

// Summary says what the plan gives up, with the numbers, in one
// sentence: "" when it gives up nothing.
func (p FDPlan) Summary() string {
	if !p.Degraded() {
		return ""
	}
	var lost []string
	if p.FoldTracker {
		lost = append(lost, "no tracker events (new threads are found by the ring's wakeups and the 500 ms /proc scan, not at once)")
	}
	if p.DroppedOffCPU {
		lost = append(lost, "no off-CPU sampling (the thread snapshot still shows where each blocked thread waits)")
	}
	how := fmt.Sprintf("sampling with %d per thread", p.PerThread)
	switch {
	case p.MaxThreads == 0:
		how, lost = "sampling nothing", []string{"no thread has room for even one event: a capture holds the thread snapshot alone"}
	case p.Subset():
		lost = append(lost, fmt.Sprintf("only %d of the %d threads sampled, the busiest by CPU time so far (the main thread always); the snapshot still has every thread", p.MaxThreads, p.Threads))
	}
	s := fmt.Sprintf("file descriptors: %d threads × %d perf events each + %d open + %d headroom need %d, RLIMIT_NOFILE allows %d (hard limit %d): %s: %s",
		p.Threads, p.Want, p.InUse, p.Headroom, p.Need(), p.Limit, p.HardLimit, how, strings.Join(lost, "; "))
	return s + "; " + NoFileFix(p.Need())
}

// NoFileFix says how to raise RLIMIT_NOFILE's hard limit to need.
func NoFileFix(need int) string {
	n := roundUp(need)
	return fmt.Sprintf("to sample every thread, raise the hard limit to %d or more: `ulimit -Hn %d` in the shell that starts stallwatch (as root), LimitNOFILE=%d in its systemd unit, or `prlimit --nofile=%d:%d --pid <stallwatch pid>` before it starts",
		n, n, n, n, n)
}

// roundUp rounds a descriptor count up to the next thousand (a limit a
// person would write).
func roundUp(n int) int { return (n + 999) / 1000 * 1000 }

// PlanFDs raises RLIMIT_NOFILE's soft limit to the hard one and plans how
// the threads of pid fit: every event asked for when they do; else the
// tracker folded into the on-CPU event, then off-CPU sampling dropped,
// then a subset of the threads. headroom 0 means DefaultFDHeadroom, or a
// quarter of a limit under 1,024 but never less than MinFDHeadroom. A plan
// whose MaxThreads is 0 samples
// nothing.
func PlanFDs(pid int, offCPU bool, headroom int) (FDPlan, error) {
	tids, err := procfs.Threads(pid)
	if err != nil {
		return FDPlan{}, fmt.Errorf("sampler: pid %d: %w", pid, err)
	}
	RaiseNoFile()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return FDPlan{}, fmt.Errorf("sampler: getrlimit(RLIMIT_NOFILE): %w", err)
	}
	if headroom <= 0 {
		// A quarter of a small limit: 256 of 1,024 would leave little.
		headroom = max(min(DefaultFDHeadroom, int(min(lim.Cur, 1<<20)/4)), MinFDHeadroom)
	}
	return planFDs(len(tids), lim.Cur, lim.Max, openFDs(), headroom, offCPU), nil
}

// planFDs is PlanFDs' arithmetic. The levels are tried in order of what
// they cost a reader: the tracker's promptness first (the /proc scan
// finds new threads within 500 ms anyway), then off-CPU sampling (the
// snapshot still shows blocked threads), then threads.
func planFDs(threads int, limit, hard uint64, inUse, headroom int, offCPU bool) FDPlan {
	p := FDPlan{Threads: threads, Limit: limit, HardLimit: hard, InUse: inUse, Headroom: headroom, Want: 2, OffCPU: offCPU}
	if offCPU {
		p.Want = 3
	}
	budget := p.Budget()
	fits := func(per int) bool { return threads*per <= budget }
	switch {
	case fits(p.Want):
		p.PerThread = p.Want
	case fits(p.Want - 1):
		p.PerThread, p.FoldTracker = p.Want-1, true
	default:
		p.PerThread, p.FoldTracker = 1, true
		p.DroppedOffCPU, p.OffCPU = offCPU, false
	}
	p.MaxThreads = budget / p.PerThread
	return p
}

// RaiseNoFile lifts RLIMIT_NOFILE's soft limit to the hard one (Go's
// runtime does so at start, and restores the soft limit for children it
// starts; this is for a caller that lowered it since). It reports whether
// the limit went up.
func RaiseNoFile() bool {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil || lim.Cur >= lim.Max {
		return false
	}
	lim.Cur = lim.Max
	return unix.Setrlimit(unix.RLIMIT_NOFILE, &lim) == nil
}

// openFDs counts this process's open descriptors.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents) - 1 // the directory's own
}

// busiestFirst orders tids by the CPU time each has used (schedstat, else
// stat's utime+stime), the main thread pid first: the threads a subset
// samples. The rule is deterministic and needs nothing but /proc.
func busiestFirst(pid int, tids []int) []int {
	cpu := make(map[int]uint64, len(tids))
	for _, tid := range tids {
		if ss, err := procfs.ReadSchedstat(pid, tid); err == nil {
			cpu[tid] = ss.RunNanos
		} else if st, err := procfs.ReadStat(pid, tid); err == nil {
			cpu[tid] = (st.Utime + st.Stime) * (1e9 / procfs.ClockTicks)
		}
	}
	out := slices.Clone(tids)
	slices.SortStableFunc(out, func(a, b int) int {
		switch {
		case a == pid:
			return -1
		case b == pid:
			return 1
		}
		if c := cmp.Compare(cpu[b], cpu[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return out
}

// PartialError is a change SetRate could not make on some threads; the
// others have it, and sampling goes on.
type PartialError struct {
	What            string // "opening off-CPU events"
	Failed, Threads int
	Err             error // the first failure; the others are alike
}

func (e *PartialError) Error() string {
	return fmt.Sprintf("sampler: %s failed on %d of %d threads: %v", e.What, e.Failed, e.Threads, e.Err)
}

func (e *PartialError) Unwrap() error { return e.Err }

// partial counts the failures of one change across threads.
type partial struct {
	what            string
	threads, failed int
	first           error
	outOfFDs        bool
}

func (p *partial) add(err error) {
	p.failed++
	if p.first == nil {
		p.first = err
	}
	p.outOfFDs = p.outOfFDs || IsDescriptorShortage(err)
}

// fdReserve is how many descriptors running out while opening off-CPU
// events gives back, so that the rest of the capture (the snapshot's
// /proc reads, the capture directory's files) still has some.
const fdReserve = DefaultFDHeadroom / 2

// giveBack closes the off-CPU events of the last n threads of opened
// (their on-CPU sampling goes on) and returns how many it closed. Called
// with s.mu held.
func (s *Sampler) giveBack(opened []*thread, n int) int {
	closed := 0
	for i := len(opened) - 1; i >= 0 && closed < n; i-- {
		t := opened[i]
		if t.off < 0 {
			continue
		}
		if t.offEnabled {
			_ = disable(t.off)
			t.offEnabled = false
		}
		s.drain(t) // what the event wrote before it was disabled
		if t.off < 0 {
			closed++ // it exited: released with its thread
			continue
		}
		t.oc = offTracker{}
		// Closed here, not by the closer: the descriptors are needed now.
		unix.Close(t.off)
		t.off, t.offID = -1, 0
		closed++
	}
	return closed
}
