package capdir

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/version"
	"github.com/stallwatch/stallwatch/model"
)

// The files of a capture directory.
const (
	FileProfile    = "profile.pb.gz"
	FileThreads    = "threads.pb.gz"
	FileThreadJSON = "threads.json" // the snapshot in full, to render it again
	FileText       = "report.txt"
	FileHTML       = "report.html"
	FileInfo       = "capture.json"
)

// NewInfo is the one place capture.json is begun: schema, version, the
// host (kernel release, hostname), the trigger and the target. The writer
// adds the window, what it collected (Counts), how (Settings), notes and
// findings.
func NewInfo(tg model.Target, tr model.Trigger) model.Info {
	kind := tr.Kind
	if kind == "" {
		kind = model.Manual
	}
	info := model.Info{
		Schema:     model.Schema,
		Version:    version.String(),
		Trigger:    kind,
		Reason:     tr.Reason,
		Heartbeat:  tr.Source,
		Seq:        tr.Seq,
		PID:        tg.PID,
		Command:    tg.Command,
		Executable: tg.Executable,
		Kernel:     kernelRelease(),
		TriggerAt:  tr.At,
		LastBeat:   tr.LastBeat,
		StallFor:   tr.StallFor,
	}
	info.Hostname, _ = os.Hostname()
	info.Host = readHost()
	return info
}

// readHost reads the machine's load; nil when /proc/loadavg cannot be
// read (the CPU count alone says little).
func readHost() *model.Host {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	h, ok := parseLoadavg(string(b))
	if !ok {
		return nil
	}
	h.CPUs = runtime.NumCPU()
	return &h
}

// parseLoadavg reads "0.52 0.58 0.59 2/431 12345".
func parseLoadavg(s string) (model.Host, bool) {
	var h model.Host
	var last int
	n, err := fmt.Sscanf(s, "%g %g %g %d/%d %d", &h.Load1, &h.Load5, &h.Load15, &h.Running, &h.Tasks, &last)
	return h, err == nil && n == 6
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
