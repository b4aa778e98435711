package report

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/stallwatch/stallwatch/internal/textfmt"
	"github.com/stallwatch/stallwatch/model"
)

// WriteThreadDump writes snap as a thread dump a person reads from the top:
// the snapshot's facts, the lock graph (deadlock cycles, then chains of
// threads waiting for each other), then every thread, identical stacks
// merged with their thread lists, waiting threads first.
func WriteThreadDump(w io.Writer, snap *model.Snapshot) error {
	if snap == nil {
		return fmt.Errorf("report: WriteThreadDump: nil snapshot")
	}
	bw := bufio.NewWriter(w)
	writeDumpHeader(bw, snap)
	fmt.Fprintln(bw)
	writeLockGraph(bw, snap)
	fmt.Fprintln(bw)
	writeStackGroups(bw, snap, groupThreads(snap))
	return bw.Flush()
}

func writeDumpHeader(w io.Writer, snap *model.Snapshot) {
	fmt.Fprintf(w, "Thread dump of pid %d", snap.PID)
	if len(snap.Command) > 0 {
		fmt.Fprintf(w, " (%s)", clean(truncate(strings.Join(snap.Command, " "), 120)))
	}
	fmt.Fprintf(w, ": %s at %s, taken in %s\n", plural(len(snap.Threads), "thread", "threads"), fmtTime(snap.Time), fmtDur(snap.Duration))
	switch {
	case snap.PtraceUsed:
		fmt.Fprintf(w, "User stacks read under ptrace, one thread at a time; longest stop %s.\n", fmtDur(snap.MaxStop))
	case snap.PtraceErr != nil:
		fmt.Fprintf(w, "No ptrace (%s): user stacks are the pc from /proc only.\n", clean(errText(snap.PtraceErr)))
	default:
		fmt.Fprintln(w, "No ptrace: user stacks are the pc from /proc only.")
	}
	if snap.TargetExited {
		fmt.Fprintln(w, "The target exited while it was read: threads after that point are missing.")
	}
	for _, n := range snap.Notes {
		fmt.Fprintf(w, "Note: %s\n", clean(n))
	}
}

// threadIndex finds threads by tid.
type threadIndex map[int]*model.Thread

func indexThreads(snap *model.Snapshot) threadIndex { return snap.ByTID() }

// name is how the dump names a thread: `tid 12 "worker"`.
func (ix threadIndex) name(tid int) string { return textfmt.ThreadLabel(tid, ix[tid]) }

func writeLockGraph(w io.Writer, snap *model.Snapshot) {
	g := &snap.Locks
	ix := indexThreads(snap)
	if len(g.Edges) == 0 && len(g.Cycles) == 0 {
		fmt.Fprintln(w, "Lock graph: no thread waits for a lock another thread holds.")
		return
	}
	fmt.Fprintln(w, "Lock graph")
	via := map[[2]int]string{}
	for _, e := range g.Edges {
		via[[2]int{e.From, e.To}] = e.Via
	}
	inCycle := map[int]int{} // tid → cycle number (1-based)
	for i, cyc := range g.Cycles {
		fmt.Fprintf(w, "  DEADLOCK %d: ", i+1)
		for _, tid := range cyc {
			fmt.Fprintf(w, "%s → ", ix.name(tid))
			inCycle[tid] = i + 1
		}
		if len(cyc) > 0 {
			fmt.Fprintf(w, "%s\n", ix.name(cyc[0]))
		}
		for j, tid := range cyc {
			next := cyc[(j+1)%len(cyc)]
			fmt.Fprintf(w, "      tid %d waits for tid %d%s\n", tid, next, viaText(via[[2]int{tid, next}]))
		}
	}
	for _, ch := range g.Chains {
		if len(ch) < 2 {
			continue
		}
		fmt.Fprint(w, "  chain: ")
		for j, tid := range ch {
			if j > 0 {
				fmt.Fprintf(w, " →%s ", viaShort(via[[2]int{ch[j-1], tid}]))
			}
			fmt.Fprint(w, ix.name(tid))
		}
		last := ch[len(ch)-1]
		if n := inCycle[last]; n > 0 {
			fmt.Fprintf(w, ", which is in deadlock %d\n", n)
		} else {
			fmt.Fprintf(w, ", which is %s\n", lastHop(ix[last]))
		}
	}
	// Waiters on a deadlocked thread that no chain mentions still matter:
	// they are stuck for as long as the deadlock lasts.
	shown := map[[2]int]bool{}
	for _, ch := range g.Chains {
		for j := 1; j < len(ch); j++ {
			shown[[2]int{ch[j-1], ch[j]}] = true
		}
	}
	for _, e := range g.Edges {
		if inCycle[e.From] == 0 && inCycle[e.To] > 0 && !shown[[2]int{e.From, e.To}] {
			fmt.Fprintf(w, "  %s waits for %s%s, which is in deadlock %d\n", ix.name(e.From), ix.name(e.To), viaText(e.Via), inCycle[e.To])
		}
	}
}

func lastHop(t *model.Thread) string {
	if t != nil && t.Wait != nil && t.Wait.Desc != "" {
		return "waiting: " + clean(t.Wait.Desc)
	}
	return doing(t)
}

func viaText(v string) string {
	if v == "" {
		return ""
	}
	return " (" + clean(v) + ")"
}

func viaShort(v string) string {
	if v == "" {
		return ""
	}
	return "[" + clean(v) + "]"
}

// stackGroup is threads with identical stacks.
type stackGroup struct {
	threads []*model.Thread
	rank    int
}

// Ranks order threads in a dump: the ones a hang is made of first.
const (
	rankDeadlocked      = iota // in a waits-for cycle
	rankWaitsOnThread          // waits for a lock another thread holds
	rankUninterruptible        // D state: the kernel cannot even signal it
	rankWaiting                // waits for something named (fd, futex, child)
	rankSleeping               // off the CPU otherwise
	rankRunning                // on a CPU or runnable
	rankOther                  // stopped, zombie, unreadable
)

func threadRank(t *model.Thread, cycle map[int]bool) int {
	switch {
	case cycle[t.TID]:
		return rankDeadlocked
	case t.Wait != nil && t.Wait.Owner != 0:
		return rankWaitsOnThread
	case t.State == 'D':
		return rankUninterruptible
	case t.Wait != nil:
		return rankWaiting
	case t.State == 'S' || t.State == 'I':
		return rankSleeping
	case t.State == 'R':
		return rankRunning
	}
	return rankOther
}

// groupThreads merges threads whose stacks print the same, and orders the
// groups: by their most urgent thread, then by size, then by how long their
// threads have been off the CPU.
func groupThreads(snap *model.Snapshot) []*stackGroup {
	cycle := map[int]bool{}
	for _, c := range snap.Locks.Cycles {
		for _, tid := range c {
			cycle[tid] = true
		}
	}
	byKey := map[string]*stackGroup{}
	var groups []*stackGroup
	for i := range snap.Threads {
		t := &snap.Threads[i]
		k := stackKey(t)
		g := byKey[k]
		if g == nil {
			g = &stackGroup{rank: rankOther + 1}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.threads = append(g.threads, t)
		g.rank = min(g.rank, threadRank(t, cycle))
	}
	for _, g := range groups {
		sort.SliceStable(g.threads, func(i, j int) bool {
			a, b := g.threads[i], g.threads[j]
			if ra, rb := threadRank(a, cycle), threadRank(b, cycle); ra != rb {
				return ra < rb
			}
			return a.TID < b.TID
		})
	}
	sort.SliceStable(groups, func(i, j int) bool {
		a, b := groups[i], groups[j]
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		if len(a.threads) != len(b.threads) {
			return len(a.threads) > len(b.threads)
		}
		if oa, ob := maxOffCPU(a), maxOffCPU(b); oa != ob {
			return oa > ob
		}
		return a.threads[0].TID < b.threads[0].TID
	})
	return groups
}

func maxOffCPU(g *stackGroup) int64 {
	var m int64
	for _, t := range g.threads {
		if t.OffCPUKnown {
			m = max(m, int64(t.OffCPUFor))
		}
	}
	return m
}

// stackKey is what makes two threads' stacks "identical": the frames as a
// person reads them (function, file, line, module), not raw addresses.
func stackKey(t *model.Thread) string {
	var sb strings.Builder
	for _, part := range [][]*model.Location{t.Kernel, t.User} {
		for _, l := range part {
			if l == nil {
				continue
			}
			sb.WriteString(moduleName(l))
			for _, ln := range l.Lines {
				sb.WriteByte(0)
				sb.WriteString(frameText(ln))
			}
			sb.WriteByte(1)
		}
		sb.WriteByte(2)
	}
	if len(t.Kernel)+len(t.User) == 0 {
		sb.WriteString(errText(t.Err))
	}
	return sb.String()
}

func writeStackGroups(w io.Writer, snap *model.Snapshot, groups []*stackGroup) {
	fmt.Fprintf(w, "Threads (%s in %s; identical stacks merged, waiting threads first)\n",
		fmtCount(int64(len(snap.Threads))), plural(len(groups), "stack", "distinct stacks"))
	for _, g := range groups {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "── %s\n", plural(len(g.threads), "thread", "threads"))
		for _, t := range g.threads {
			writeThreadLine(w, t)
		}
		writeStack(w, g.threads[0])
	}
}

// writeThreadLine prints one thread's facts on one line (two when it
// waits for something named).
func writeThreadLine(w io.Writer, t *model.Thread) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "   tid %-7d %-16s %s", t.TID, quoted(t.Name), model.StateName(t.State))
	if t.Syscall != nil {
		fmt.Fprintf(&sb, "  in %s", clean(syscallText(t.Syscall)))
	} else if t.Wchan != "" {
		fmt.Fprintf(&sb, "  wchan %s", clean(t.Wchan))
	}
	if t.OffCPUKnown {
		fmt.Fprintf(&sb, "  off-CPU %s", fmtDur(t.OffCPUFor))
		if t.OffCPUSource != "" && t.OffCPUSource != "sched" {
			fmt.Fprintf(&sb, " (%s)", clean(t.OffCPUSource))
		}
	}
	fmt.Fprintf(&sb, "  runq wait %s", fmtDur(t.RunqueueWait))
	if t.Stopped {
		fmt.Fprintf(&sb, "  stopped %s", fmtDur(t.Stop))
	}
	fmt.Fprintf(&sb, "  switches %d/%d", t.VoluntarySwitches, t.InvoluntarySwitches)
	fmt.Fprintln(w, sb.String())
	if t.Wait != nil {
		desc := t.Wait.Desc
		if desc == "" {
			desc = t.Wait.Kind
		}
		if t.Wait.Owner != 0 && !strings.Contains(desc, "tid") {
			desc += fmt.Sprintf(" held by tid %d", t.Wait.Owner)
		}
		fmt.Fprintf(w, "                 waits for %s\n", clean(desc))
	}
	if t.Err != nil {
		fmt.Fprintf(w, "                 could not read: %s\n", clean(errText(t.Err)))
	}
}

// writeStack prints a thread's kernel and user stacks, innermost first,
// one line per function (inlined functions get their own line).
func writeStack(w io.Writer, t *model.Thread) {
	if len(t.Kernel)+len(t.User) == 0 {
		fmt.Fprintln(w, "      (no stack)")
		return
	}
	for _, l := range t.Kernel {
		writeFrame(w, l, "k")
	}
	if len(t.Kernel) > 0 && len(t.User) > 0 {
		fmt.Fprintln(w, "      ─── user")
	}
	for _, l := range t.User {
		writeFrame(w, l, " ")
	}
	if len(t.User) > 0 && t.Unwinder != "" && t.Unwinder != "fp" && t.Unwinder != "cfi+fp" {
		fmt.Fprintf(w, "      (user stack: %s)\n", clean(t.Unwinder))
	}
}

func writeFrame(w io.Writer, l *model.Location, mark string) {
	if l == nil {
		return
	}
	mod := moduleName(l)
	for i, ln := range l.Lines {
		text := frameText(ln)
		if i < len(l.Lines)-1 {
			text += " (inlined)"
		}
		if mod != "" {
			fmt.Fprintf(w, "    %s %-60s %s\n", mark, text, mod)
		} else {
			fmt.Fprintf(w, "    %s %s\n", mark, text)
		}
	}
	if len(l.Lines) == 0 {
		fmt.Fprintf(w, "    %s %#x %s\n", mark, l.Addr, mod)
	}
}
