package schedclock

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

func TestParseExecStart(t *testing.T) {
	tests := []struct {
		text string
		ns   uint64
		ok   bool
	}{
		{"head (1, #threads: 1)\n---\nse.exec_start                                :       1903909.702892\nse.vruntime : 1.0\n", 1903909702892, true},
		{"se.exec_start : 12\n", 12_000_000, true},
		{"se.exec_start : 12.5\n", 12_500_000, true},
		{"se.exec_start : -1.0\n", 0, false},
		{"se.exec_start : 99999999999999999999.0\n", 0, false},
		{"se.vruntime : 1.0\n", 0, false},
		{"", 0, false},
		{"se.exec_start : 1.2345678901\n", 1_234_567, true}, // beyond the nanosecond: cut off
		{"se.exec_start : 1.2x\n", 0, false},
		{"se.exec_start : .5\n", 0, false},
		{"se.exec_start : 9223372036854.775807\n", 9223372036854_775807, true},
		{"se.exec_start : 9223372036855.0\n", 0, false}, // beyond an int64 of nanoseconds
		{"se.exec_start : 7.25\r\n", 7_250_000, true},
		{"x\nse.exec_start : 3", 3_000_000, true}, // no newline at the end
	}
	for _, tc := range tests {
		ns, ok := ParseExecStart([]byte(tc.text))
		if ns != tc.ns || ok != tc.ok {
			t.Errorf("%q: %d %v, want %d %v", tc.text, ns, ok, tc.ns, tc.ok)
		}
	}
	// A snapshot parses the sched file of every thread it reads.
	b, err := os.ReadFile("/proc/thread-self/sched")
	if err != nil {
		b = []byte(tests[0].text)
	}
	if n := testing.AllocsPerRun(100, func() { ParseExecStart(b) }); n != 0 {
		t.Errorf("parsing a sched file allocated %v times", n)
	}
}

// FuzzParseExecStart: whatever it accepts, it reads back the same from the
// kernel's own formatting of the value.
func FuzzParseExecStart(f *testing.F) {
	f.Add([]byte("se.exec_start                                :       1903909.702892\n"))
	f.Add([]byte("se.exec_start : 1.2345678901\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var ns uint64
		var ok bool
		if n := testutil.HeapBytes(func() { ns, ok = ParseExecStart(b) }); n > 2*uint64(len(b))+4<<20 {
			t.Fatalf("parsing %d bytes allocated %d", len(b), n)
		}
		if !ok {
			return
		}
		again, ok := ParseExecStart([]byte(fmt.Sprintf("se.exec_start : %d.%06d\n", ns/1e6, ns%1e6)))
		if !ok || again != ns {
			t.Fatalf("%q → %d, formatted back → %d %v", b, ns, again, ok)
		}
	})
}

// TestSleepingThread: a thread that blocks at a known CLOCK_MONOTONIC
// instant is found, from its se.exec_start and the calibrated clock, to
// have left the CPU after that instant and before we saw it asleep. The
// kernel's task clock runs behind CLOCK_MONOTONIC by the steal time since
// boot; read raw, exec_start puts the sleep seconds too early on a
// long-running virtual machine.
func TestSleepingThread(t *testing.T) {
	if _, err := os.Stat("/proc/thread-self/sched"); err != nil {
		testutil.Skip(t, "no per-thread sched file on this kernel (CONFIG_SCHED_DEBUG): %v", err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])

	type start struct {
		tid int
		at  uint64
	}
	started := make(chan start, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		started <- start{unix.Gettid(), monotime.Now()}
		var b [1]byte
		unix.Read(p[0], b[:]) // blocks until the test writes
	}()
	s := <-started
	defer unix.Write(p[1], []byte{1})

	pid := os.Getpid()
	var st procfs.Stat
	err := testutil.Eventually(5*time.Second, func() bool {
		var err error
		st, err = procfs.ReadStat(pid, s.tid)
		return err == nil && st.State == 'S'
	})
	if err != nil {
		t.Fatalf("thread %d never slept: state %c", s.tid, st.State)
	}
	seen := monotime.Now()
	stealBefore := stealTicks(t, st.Processor)

	b, err := procfs.ReadLimited(procfs.TaskPath(pid, s.tid, "sched"), 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	task, ok := ParseExecStart(b)
	if !ok {
		t.Fatalf("no exec_start in %q", b)
	}
	mono, off, err := New().ToMono(st.Processor, task)
	if err != nil {
		t.Fatal(err)
	}
	// Steal after the sleep began moves the offset on; it can only make
	// the sleep look later, by at most the steal counted meanwhile.
	steal := time.Duration(stealTicks(t, st.Processor)-stealBefore+1) * time.Second / procfs.ClockTicks
	low := s.at - uint64(off.Error)
	high := seen + uint64(off.Error) + uint64(steal)
	t.Logf("CPU %d offset %v ± %v; raw exec_start %d, monotonic %d; blocked at %d, seen at %d", off.CPU, time.Duration(off.Nanos), off.Error, task, mono, s.at, seen)
	if mono < low || mono > high {
		t.Errorf("sleep began at %d on CLOCK_MONOTONIC, want within [%d, %d] (%v before the known start, %v after it was seen)",
			mono, low, high, time.Duration(int64(s.at)-int64(mono)), time.Duration(int64(mono)-int64(seen)))
	}
	if off.Error > 5*time.Millisecond {
		t.Errorf("calibration uncertain by %v, want under 5ms", off.Error)
	}
}

// TestEveryCPU: every CPU we may run on is measured pinned, to within a
// few milliseconds; a CPU outside the mask borrows another's offset and
// says so.
func TestEveryCPU(t *testing.T) {
	if _, err := os.Stat("/proc/thread-self/sched"); err != nil {
		testutil.Skip(t, "no per-thread sched file on this kernel (CONFIG_SCHED_DEBUG): %v", err)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	c := New()
	for cpu := 0; cpu < len(set)*64; cpu++ {
		if !set.IsSet(cpu) {
			continue
		}
		o, err := c.Offset(cpu)
		if err != nil {
			t.Fatalf("CPU %d: %v", cpu, err)
		}
		if !o.Pinned || o.CPU != cpu || o.Error > 5*time.Millisecond {
			t.Errorf("CPU %d: %+v, want pinned and within 5ms", cpu, o)
		}
	}
	outside := len(set)*64 - 1
	o, err := c.Offset(outside)
	if err != nil || o.Pinned || o.CPU != outside {
		t.Errorf("CPU %d outside the mask: %+v %v, want a borrowed offset", outside, o, err)
	}
}

// stealTicks reads the steal column of one CPU's line in /proc/stat.
func stealTicks(t *testing.T, cpu int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	prefix := "cpu" + strconv.Itoa(cpu) + " "
	for _, line := range bytes.Split(b, []byte("\n")) {
		if !strings.HasPrefix(string(line), prefix) {
			continue
		}
		f := strings.Fields(string(line))
		if len(f) < 9 {
			t.Fatalf("/proc/stat line %q has no steal column", line)
		}
		n, err := strconv.ParseUint(f[8], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	t.Fatalf("no %q line in /proc/stat", prefix)
	return 0
}
