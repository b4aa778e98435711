package snapshot

import (
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/schedclock"
)

// schedSleepStart returns when a sleeping thread last left the CPU, on
// CLOCK_MONOTONIC: its se.exec_start (kernels built with
// CONFIG_SCHED_DEBUG) converted from the task clock of the CPU it last ran
// on, which on a virtual machine runs behind CLOCK_MONOTONIC by the steal
// time since boot (see package schedclock).
func schedSleepStart(clock *schedclock.Clock, f *taskFiles) (uint64, bool) {
	// stat before sched: if the thread ran in between, its exec_start
	// is newer and the interval only shorter, never longer.
	b, err := f.read("stat")
	if err != nil {
		return 0, false
	}
	st, err := procfs.ParseStat(b)
	if err != nil {
		return 0, false
	}
	b, err = f.read("sched")
	if err != nil {
		return 0, false
	}
	at, ok := schedclock.ParseExecStart(b)
	if !ok {
		return 0, false
	}
	mono, _, err := clock.ToMono(st.Processor, at)
	return mono, err == nil
}

// hasSchedFile reports whether the kernel provides the per-thread sched
// file at all.
func hasSchedFile(pid int) bool {
	_, err := procfs.ReadLimited(procfs.PidPath(pid, "sched"), 64<<10)
	return err == nil
}
