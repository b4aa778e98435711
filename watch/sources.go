package watch

import (
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/watchdog"
)

// sources makes the target's heartbeats of h: every file and URL with
// {pid} and {root} expanded, each source polled at the interval
// stall-after asks for, its failures logged to log, the process's
// progress read by poller (with the target's start time, so that a pid
// the kernel reuses is not taken for the target) and a tap's heartbeat
// from taps.
func sources(h *Heartbeat, stallAfter time.Duration, t target, poller *watchdog.Poller, taps *Taps, log *slog.Logger) ([]watchdog.Source, error) {
	poll := watchdog.PollInterval(stallAfter)
	var srcs []watchdog.Source
	for _, p := range h.Files {
		srcs = append(srcs, &watchdog.File{Path: expand(p, t.pid), Poll: poll})
	}
	if h.HTTP != "" {
		srcs = append(srcs, &watchdog.HTTP{URL: expand(h.HTTP, t.pid), Interval: h.HTTPInterval, Timeout: h.HTTPTimeout, Logger: log})
	}
	if h.Proc {
		srcs = append(srcs, &watchdog.Progress{PID: t.pid, Start: t.start, Interval: poll, Poller: poller})
	}
	if h.Tap != "" {
		src, err := taps.source(h.Tap, t.pid, h.Metric, h.MetricTags)
		if err != nil {
			return nil, err
		}
		srcs = append(srcs, src)
	}
	return srcs, nil
}

// expand replaces {pid} in a heartbeat's file path or URL with the
// target's pid and {root} with its root directory as stallwatch sees it
// (/proc/PID/root: a container's files), so that one setting serves
// every process a rule selects, or a child whose pid is not known before
// it starts.
func expand(s string, pid int) string {
	return strings.NewReplacer("{pid}", strconv.Itoa(pid), "{root}", procfs.PidPath(pid, "root")).Replace(s)
}
