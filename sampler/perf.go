package sampler

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/procfs"
)

var attrSize = uint32(unsafe.Sizeof(unix.PerfEventAttr{}))

// The three events opened on every thread (two when the tracker is folded
// into the on-CPU event, Config.FoldTracker). The tracker never samples: it
// brings FORK, EXIT and COMM records (task=1, comm=1) into a small ring of
// its own that wakes the reader at every record, so threads are followed
// at once whatever the sampling rate is. The on-CPU event owns the sample
// ring (woken when half full); the off-CPU event writes into it too
// (PERF_EVENT_IOC_SET_OUTPUT: allowed because both watch the same task).
// Each is enabled and disabled on its own.
func (s *Sampler) trackerAttr() unix.PerfEventAttr {
	return unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_DUMMY,
		Size:        attrSize,
		Sample_type: commonSampleType,
		// exclude_kernel: the tracker samples nothing, and without it
		// an unprivileged user would need kernel profiling rights.
		// watermark=1, wakeup_watermark=1: every record wakes the reader,
		// so a new thread is attached as soon as its FORK is written.
		Bits: unix.PerfBitSampleIDAll | unix.PerfBitUseClockID | unix.PerfBitTask |
			unix.PerfBitComm | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv |
			unix.PerfBitWatermark,
		Wakeup:  1,
		Clockid: unix.CLOCK_MONOTONIC,
	}
}

// onCPUAttr is the cpu-clock event. Its "frequency mode" is a fixed period
// inside the kernel (perf_swevent_init_hrtimer turns sample_freq into
// 1e9/freq ns and clears attr.freq), after which PERF_EVENT_IOC_PERIOD
// takes nanoseconds. Asking for the period directly keeps that meaning
// plain on every kernel.
func (s *Sampler) onCPUAttr(freq, dump int) unix.PerfEventAttr {
	a := unix.PerfEventAttr{
		Type:             unix.PERF_TYPE_SOFTWARE,
		Config:           unix.PERF_COUNT_SW_CPU_CLOCK,
		Size:             attrSize,
		Sample:           periodOf(freq),
		Sample_type:      sampleType,
		Bits:             unix.PerfBitDisabled | unix.PerfBitSampleIDAll | unix.PerfBitUseClockID | unix.PerfBitExcludeHv,
		Clockid:          unix.CLOCK_MONOTONIC,
		Sample_max_stack: uint16(s.cfg.MaxStack),
	}
	// The sample ring lives on this event: the reader is woken when a
	// quarter of it is full (openOnCPU sets Wakeup by the ring it maps),
	// leaving three quarters for the time it takes to be scheduled on a
	// busy machine.
	a.Bits |= unix.PerfBitWatermark
	a.Wakeup = s.wakeupBytes(s.ringBytes(dump, 0))
	if s.cfg.FoldTracker {
		a.Bits |= unix.PerfBitTask | unix.PerfBitComm
	}
	if s.hardware {
		a.Type, a.Config = unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES
		a.Sample = uint64(freq)
		a.Bits |= unix.PerfBitFreq
	}
	if !s.cfg.Kernel {
		a.Bits |= unix.PerfBitExcludeKernel | unix.PerfBitExcludeCallchainKernel
	}
	if dump > 0 {
		a.Sample_type |= unix.PERF_SAMPLE_REGS_USER | unix.PERF_SAMPLE_STACK_USER
		a.Sample_regs_user = userRegsMask
		a.Sample_stack_user = uint32(dump)
	}
	return a
}

// offCPUAttr is the context-switches event, one sample per switch-out, and
// PERF_RECORD_SWITCH records (context_switch=1) for both directions. The
// switch happens in the kernel, so the event cannot exclude the kernel
// (it would never fire); without Kernel only the kernel part of its
// callchain is left out.
func (s *Sampler) offCPUAttr(dump int) unix.PerfEventAttr {
	a := unix.PerfEventAttr{
		Type:             unix.PERF_TYPE_SOFTWARE,
		Config:           unix.PERF_COUNT_SW_CONTEXT_SWITCHES,
		Size:             attrSize,
		Sample:           1,
		Sample_type:      sampleType,
		Bits:             unix.PerfBitDisabled | unix.PerfBitSampleIDAll | unix.PerfBitUseClockID | unix.PerfBitContextSwitch | unix.PerfBitExcludeHv,
		Clockid:          unix.CLOCK_MONOTONIC,
		Sample_max_stack: uint16(s.cfg.MaxStack),
	}
	if !s.cfg.Kernel {
		a.Bits |= unix.PerfBitExcludeCallchainKernel
	}
	if dump > 0 {
		a.Sample_type |= unix.PERF_SAMPLE_REGS_USER | unix.PERF_SAMPLE_STACK_USER
		a.Sample_regs_user = userRegsMask
		a.Sample_stack_user = uint32(dump)
	}
	return a
}

func layoutOfAttr(a *unix.PerfEventAttr) layout {
	var l layout
	if a.Sample_type&unix.PERF_SAMPLE_REGS_USER != 0 {
		l.nregs = userRegsCount
	}
	l.stack = a.Sample_type&unix.PERF_SAMPLE_STACK_USER != 0
	return l
}

// periodOf is the cpu-clock period in nanoseconds for freq samples per
// second of CPU time.
func periodOf(freq int) uint64 {
	if freq <= 0 {
		return 0
	}
	return uint64(1e9 / freq)
}

func perfOpen(a *unix.PerfEventAttr, tid int) (int, error) {
	for {
		fd, err := unix.PerfEventOpen(a, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func ioctlPtr(fd int, req uint, p unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(p))
	if e != 0 {
		return e
	}
	return nil
}

func eventID(fd int) (uint64, error) {
	var id uint64
	err := ioctlPtr(fd, unix.PERF_EVENT_IOC_ID, unsafe.Pointer(&id))
	return id, err
}

func setPeriod(fd int, v uint64) error {
	return ioctlPtr(fd, unix.PERF_EVENT_IOC_PERIOD, unsafe.Pointer(&v))
}

func setOutput(fd, to int) error { return unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_OUTPUT, to) }
func enable(fd int) error        { return unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0) }
func disable(fd int) error       { return unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0) }

// errGone is a thread that exited before or while we attached to it.
var errGone = errors.New("thread exited")

// openErr explains a failed perf_event_open on thread tid.
func (s *Sampler) openErr(what string, tid int, err error, needsKernel bool) error {
	op := fmt.Sprintf("perf_event_open(%s) on thread %d of pid %d", what, tid, s.pid)
	switch {
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("%s: %w", op, errGone)
	case perms.IsPermission(err) && what == "context-switches":
		return perms.Explain(perms.SampleOffCPU, op, err)
	case perms.IsPermission(err):
		return perms.PerfEvent(op, err, needsKernel)
	case errors.Is(err, unix.EMFILE):
		var lim unix.Rlimit
		_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
		threads := len(s.live) + 1
		per := s.perThread()
		return fmt.Errorf("%s: %w: %d threads watched need %d file descriptors each; RLIMIT_NOFILE is %d (hard limit %d): %s",
			op, err, threads, per, lim.Cur, lim.Max, NoFileFix(threads*per+openFDsBesides(len(s.live)*per)))
	case errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%s: %w: this kernel or machine does not have the event", op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// perThread is the most descriptors one watched thread holds under this
// configuration: the tracker (unless folded), the on-CPU event, and the
// off-CPU event once off-CPU sampling was asked for.
func (s *Sampler) perThread() int {
	n := 2
	if s.cfg.FoldTracker {
		n = 1
	}
	if s.offCPU || s.cfg.OffCPU {
		n++
	}
	return n
}

// openFDsBesides is how many descriptors this process has open beyond
// the events counted.
func openFDsBesides(events int) int { return max(openFDs()-events, 0) + DefaultFDHeadroom }

// mlockErr explains an mmap of a ring refused for locked memory: what is
// used up, and the setting and limit that make room, before what the
// permissions table says of CAP_IPC_LOCK.
func mlockErr(op string, err error, bytes int) error {
	kb, _ := procfs.Sysctl("kernel.perf_event_mlock_kb")
	var e *perms.Error
	if !errors.As(perms.Explain(perms.LockedMemory, op, err), &e) {
		return fmt.Errorf("%s: %w", op, err)
	}
	e.Missing = fmt.Sprintf("locked memory for perf rings: kernel.perf_event_mlock_kb (%d KiB per CPU) and RLIMIT_MEMLOCK are used up (this ring needs %d KiB), and %s", kb, bytes>>10, e.Missing)
	e.Fix = fmt.Sprintf("`sudo sysctl kernel.perf_event_mlock_kb=%d`, or raise RLIMIT_MEMLOCK (ulimit -l, LimitMEMLOCK=), or %s", kb+bytes>>10, e.Fix)
	return e
}

// wakeupBytes is the watermark of a sample ring of size bytes: a quarter
// of it, or one byte — every record — with Config.PromptWakeup.
func (s *Sampler) wakeupBytes(size int) uint32 {
	if s.cfg.PromptWakeup {
		return 1
	}
	return uint32(max(size/4, 8))
}
