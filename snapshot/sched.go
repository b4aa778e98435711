package snapshot

import (
	"bufio"
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// schedExecStart reads se.exec_start from /proc/<pid>/task/<tid>/sched
// (kernels built with CONFIG_SCHED_DEBUG only): when the scheduler last
// accounted the thread's run time, in nanoseconds of the run queue clock.
// The clock is sched_clock, which on x86-64 counts from boot like
// CLOCK_MONOTONIC (they differ across suspend).
func schedExecStart(pid, tid int) (uint64, bool) {
	b, err := procfs.ReadLimited(procfs.TaskPath(pid, tid, "sched"), 64<<10)
	if err != nil {
		return 0, false
	}
	return parseExecStart(b)
}

// parseExecStart finds "se.exec_start : 12345.678901" (milliseconds with
// six decimals) in the text of a sched file.
func parseExecStart(b []byte) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "se.exec_start" {
			continue
		}
		ms, frac, _ := strings.Cut(strings.TrimSpace(v), ".")
		whole, err := strconv.ParseUint(ms, 10, 64)
		if err != nil || whole > uint64(1<<63)/uint64(time.Millisecond) {
			return 0, false
		}
		ns := whole * uint64(time.Millisecond)
		if frac != "" {
			frac = (frac + "000000")[:6]
			f, err := strconv.ParseUint(frac, 10, 64)
			if err != nil {
				return 0, false
			}
			ns += f
		}
		return ns, true
	}
	return 0, false
}

// hasSchedFile reports whether the kernel provides the per-thread sched
// file at all.
func hasSchedFile(pid int) bool {
	_, err := procfs.ReadLimited(procfs.PidPath(pid, "sched"), 64<<10)
	return err == nil
}
