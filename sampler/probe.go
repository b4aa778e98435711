package sampler

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// ProbeResult is what the kernel answered, event by event, when asked for
// the events a sampler would open. A nil error means the event opened.
type ProbeResult struct {
	// OnCPU is the on-CPU event as configured (with kernel frames when
	// cfg.Kernel).
	OnCPU error
	// OnCPUUser is the on-CPU event without kernel frames: asked only
	// when OnCPU was refused with kernel frames, to tell whether
	// leaving them out would do.
	OnCPUUser error
	// OffCPU is the context-switch event, when cfg.OffCPU.
	OffCPU error
}

// Probe opens, on the main thread of cfg.PID, each event that Start would
// open with cfg, and closes it at once. perf_event_open checks its
// permissions (kernel.perf_event_paranoid, CAP_PERFMON, access to another
// user's process) when an event is opened, so a probe tells before
// anything is sampled what would be refused; the errors are the kernel's
// errnos, wrapped with the event's name. Nothing is sampled and no ring is
// mapped.
func Probe(cfg Config) ProbeResult {
	if err := cfg.check(); err != nil {
		return ProbeResult{OnCPU: err}
	}
	s := &Sampler{cfg: cfg, pid: cfg.PID, pageSize: os.Getpagesize()}
	var r ProbeResult
	a := s.onCPUAttr(max(cfg.Freq, placeholderFreq), dumpSize(cfg.DumpOnCPU, 0))
	r.OnCPU = probeOpen(&a, cfg.PID, "cpu-clock")
	if r.OnCPU != nil && cfg.Kernel {
		s.cfg.Kernel = false
		a := s.onCPUAttr(max(cfg.Freq, placeholderFreq), dumpSize(cfg.DumpOnCPU, 0))
		r.OnCPUUser = probeOpen(&a, cfg.PID, "cpu-clock, user frames only")
		s.cfg.Kernel = true
	}
	if cfg.OffCPU {
		a := s.offCPUAttr(dumpSize(cfg.DumpOffCPU, defaultDumpOffCPU))
		r.OffCPU = probeOpen(&a, cfg.PID, "context-switches")
	}
	return r
}

func probeOpen(a *unix.PerfEventAttr, tid int, what string) error {
	fd, err := perfOpen(a, tid)
	if err != nil {
		return fmt.Errorf("perf_event_open(%s) on pid %d: %w", what, tid, err)
	}
	unix.Close(fd)
	return nil
}

// FreqLimit is the highest on-CPU sampling rate this machine allows, and
// what sets it: the kernel.perf_event_max_sample_rate sysctl, or
// cpu-clock's own 100 kHz (a period of 10 µs).
func FreqLimit() (limit int, bySysctl bool) {
	limit = cpuClockMaxFreq
	if n, err := procfs.Sysctl(maxSampleRate); err == nil && n < limit {
		return n, true
	}
	return limit, false
}

const (
	cpuClockMaxFreq = 100000
	maxSampleRate   = "kernel.perf_event_max_sample_rate"
)

// FreqError is a sampling rate above what the machine allows.
type FreqError struct {
	Freq, Limit int
	BySysctl    bool // the limit is kernel.perf_event_max_sample_rate
}

func (e *FreqError) Error() string {
	if e.BySysctl {
		return fmt.Sprintf("sampler: frequency %d Hz is above kernel.perf_event_max_sample_rate (%d)", e.Freq, e.Limit)
	}
	return fmt.Sprintf("sampler: frequency %d Hz is above cpu-clock's %d Hz", e.Freq, e.Limit)
}

// ErrFreq matches every *FreqError.
var ErrFreq = errors.New("sampling rate above the machine's limit")

func (e *FreqError) Is(target error) bool { return target == ErrFreq }
