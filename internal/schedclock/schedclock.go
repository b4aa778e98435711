// Package schedclock converts times read from the scheduler's accounting
// (se.exec_start in /proc/<pid>/task/<tid>/sched) to CLOCK_MONOTONIC, the
// one clock stallwatch keeps every time on.
//
// se.exec_start is the run queue's task clock: sched_clock with the time
// the CPU spent in interrupts and, on a virtual machine, the time the
// hypervisor stole from it taken out (CONFIG_IRQ_TIME_ACCOUNTING,
// CONFIG_PARAVIRT_TIME_ACCOUNTING). It is kept per CPU, so its distance to
// CLOCK_MONOTONIC differs between CPUs and grows with every second of
// steal: on a cloud host that has been up for a while it is seconds. It is
// never assumed equal to CLOCK_MONOTONIC; it is measured here, per CPU, at
// the moment it is used.
//
// The measurement pins a thread of our own to the CPU, makes the scheduler
// account for it (sched_yield updates se.exec_start to the task clock of
// that instant), and reads the thread's own sched file between two
// CLOCK_MONOTONIC readings. The offset is known to within half the
// distance of those readings; the best of a few tries is kept.
package schedclock

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/monotime"
)

// tries is how many measurements are taken per CPU; the narrowest wins.
const tries = 5

// ErrNoSchedFile means the kernel keeps no per-thread sched file (it was
// built without CONFIG_SCHED_DEBUG).
var ErrNoSchedFile = errors.New("no /proc/<pid>/task/<tid>/sched (kernel built without CONFIG_SCHED_DEBUG)")

// Offset is CLOCK_MONOTONIC minus a CPU's task clock, measured at one
// instant, and how uncertain it is.
type Offset struct {
	CPU   int
	Nanos int64         // monotonic = task clock + Nanos
	Error time.Duration // half the width of the measuring window
	// Pinned is false when the CPU was outside our affinity mask and the
	// offset is another CPU's, the one that gives the shortest off-CPU
	// times (so an interval is never made longer than it was).
	Pinned bool
}

// Clock converts task-clock readings of the CPUs it is asked about,
// measuring each CPU once, when it is first needed. A Clock is meant for
// one snapshot: the offsets drift with steal time, so a new snapshot makes
// a new Clock. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	offsets map[int]Offset
	err     error
}

// New returns a Clock that has measured nothing yet.
func New() *Clock { return &Clock{offsets: map[int]Offset{}} }

// ToMono converts a task-clock time of the given CPU (the processor field
// of the thread's stat: the CPU it last ran on, whose clock stamped its
// exec_start) to CLOCK_MONOTONIC.
func (c *Clock) ToMono(cpu int, taskNanos uint64) (uint64, Offset, error) {
	off, err := c.Offset(cpu)
	if err != nil {
		return 0, off, err
	}
	mono := int64(taskNanos) + off.Nanos
	if mono < 0 {
		return 0, off, fmt.Errorf("task clock %d ns of CPU %d is before boot on CLOCK_MONOTONIC (offset %d ns)", taskNanos, cpu, off.Nanos)
	}
	return uint64(mono), off, nil
}

// Offset measures (once) and returns the offset of one CPU.
func (c *Clock) Offset(cpu int) (Offset, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o, ok := c.offsets[cpu]; ok {
		return o, nil
	}
	if c.err != nil {
		return Offset{}, c.err
	}
	o, err := measureOn(cpu)
	if errors.Is(err, unix.EINVAL) {
		// Not a CPU we may run on (a cpuset, or an offline CPU).
		o, err = c.fallback(cpu)
	}
	if err != nil {
		if errors.Is(err, ErrNoSchedFile) {
			c.err = err
		}
		return Offset{}, err
	}
	c.offsets[cpu] = o
	return o, nil
}

// fallback borrows the largest offset among the CPUs we can run on: the
// latest instant a sleep could have begun, hence the shortest interval.
func (c *Clock) fallback(cpu int) (Offset, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return Offset{}, fmt.Errorf("sched_getaffinity: %w", err)
	}
	best, found := Offset{}, false
	for other := 0; other < len(set)*64; other++ {
		if !set.IsSet(other) {
			continue
		}
		o, ok := c.offsets[other]
		if !ok {
			var err error
			if o, err = measureOn(other); err != nil {
				continue
			}
			c.offsets[other] = o
		}
		if !found || o.Nanos > best.Nanos {
			best, found = o, true
		}
	}
	if !found {
		return Offset{}, fmt.Errorf("task clock of CPU %d: no CPU we may run on could be measured", cpu)
	}
	best.CPU, best.Pinned = cpu, false
	return best, nil
}

// measureOn pins a fresh OS thread to cpu and measures its offset there.
// The goroutine exits locked, so the runtime discards the thread and its
// affinity with it: no other goroutine ever runs pinned.
func measureOn(cpu int) (Offset, error) {
	type result struct {
		o   Offset
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			ch <- result{err: fmt.Errorf("pin to CPU %d: %w", cpu, err)}
			return
		}
		o, err := measureHere()
		o.CPU, o.Pinned = cpu, true
		ch <- result{o, err}
	}()
	r := <-ch
	return r.o, r.err
}

// measureHere measures the offset of the CPU the calling thread is pinned
// to.
func measureHere() (Offset, error) {
	f, err := os.Open("/proc/thread-self/sched")
	if errors.Is(err, os.ErrNotExist) {
		return Offset{}, ErrNoSchedFile
	}
	if err != nil {
		return Offset{}, err
	}
	defer f.Close()
	buf := make([]byte, 16<<10)
	best := Offset{Error: -1}
	for i := 0; i < tries; i++ {
		before := monotime.Now()
		if _, _, e := unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0); e != 0 {
			return Offset{}, fmt.Errorf("sched_yield: %w", e)
		}
		n, err := f.ReadAt(buf, 0)
		after := monotime.Now()
		if err != nil && n == 0 {
			return Offset{}, fmt.Errorf("/proc/thread-self/sched: %w", err)
		}
		// exec_start was set at the yield, or at a later switch back in
		// if the read was preempted: inside [before, after] either way.
		at, ok := ParseExecStart(buf[:n])
		if !ok {
			return Offset{}, fmt.Errorf("/proc/thread-self/sched: no se.exec_start")
		}
		width := time.Duration(after - before)
		if best.Error < 0 || width/2 < best.Error {
			best = Offset{Nanos: int64(before+after)/2 - int64(at), Error: width / 2}
		}
	}
	return best, nil
}

// ParseExecStart finds "se.exec_start : 12345.678901" (milliseconds with
// six decimals) in the text of a sched file and returns it in nanoseconds.
// It reads the text in place, allocating nothing: a snapshot parses the
// file of every thread.
func ParseExecStart(b []byte) (uint64, bool) {
	for len(b) > 0 {
		line, rest, _ := bytes.Cut(b, []byte("\n"))
		b = rest
		k, v, ok := bytes.Cut(line, []byte(":"))
		if ok && string(bytes.TrimSpace(k)) == "se.exec_start" {
			return parseMillis(bytes.TrimSpace(v))
		}
	}
	return 0, false
}

// parseMillis parses milliseconds with up to six decimals (more are cut
// off) to nanoseconds; false if it is not that or does not fit an int64.
func parseMillis(v []byte) (uint64, bool) {
	ms, frac, _ := bytes.Cut(v, []byte("."))
	whole, ok := parseDigits(ms, uint64(1<<63)/uint64(time.Millisecond))
	if !ok {
		return 0, false
	}
	ns := whole * uint64(time.Millisecond)
	if len(frac) == 0 {
		return ns, true
	}
	frac = frac[:min(len(frac), 6)]
	f, ok := parseDigits(frac, 999999)
	if !ok {
		return 0, false
	}
	for range 6 - len(frac) {
		f *= 10
	}
	return ns + f, true
}

// parseDigits parses a non-empty run of decimal digits whose value is at
// most limit.
func parseDigits(b []byte, limit uint64) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (limit-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}
