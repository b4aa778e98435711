package sampler

import (
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestRingBytes: a ring holds RingHold of records at the peak rate, for
// a flight recorder that SetRate will raise too, within each thread's
// share of the budget; never less than two of the largest records; and
// all rings together stay within the budget, or within two records a
// thread when the threads are too many for it.
func TestRingBytes(t *testing.T) {
	const page = 4096
	capture := Config{PID: 1, Freq: 997, OffCPU: true, Kernel: true, DumpOnCPU: 16 << 10, DumpOffCPU: 16 << 10}
	flight := Config{PID: 1, Freq: 49, Kernel: true, DumpOnCPU: 16 << 10, DumpOffCPU: 16 << 10, PeakFreq: 997, PeakOffCPU: true}
	fp := Config{PID: 1, Freq: 997, OffCPU: true, Kernel: true, DumpOffCPU: -1}
	for _, tc := range []struct {
		name    string
		cfg     Config
		threads int
		want    int // one ring's bytes
	}{
		// 997 samples and 1,000 switches a second of ~17.6 KiB records,
		// a quarter of a second: 8.7 MB, rounded up to 16 MiB.
		{"capture, 16 KiB copies, 1 thread", capture, 1, 16 << 20},
		{"flight recorder sized for its captures", flight, 1, 16 << 20},
		{"capture, 16 KiB copies, 8 threads", capture, 8, 8 << 20},
		{"capture, 16 KiB copies, 1,000 threads", capture, 1000, 64 << 10},
		// Two records of 17.6 KiB round up to 64 KiB: 7,000 of them are
		// past the budget.
		{"capture, 16 KiB copies, 7,000 threads", capture, 7000, 64 << 10},
		// Frame pointers: records of ~1.1 KiB, 0.55 MB a quarter second.
		{"frame pointers, 1 thread", fp, 1, 1 << 20},
		{"frame pointers, 1,000 threads", fp, 1000, 64 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if err := cfg.check(); err != nil {
				t.Fatal(err)
			}
			s := &Sampler{cfg: cfg, pageSize: page, dumpOn: dumpSize(cfg.DumpOnCPU, 0), dumpOff: dumpSize(cfg.DumpOffCPU, defaultDumpOffCPU),
				live: map[int]*thread{}, expect: tc.threads}
			var first int
			for i := range tc.threads {
				n := s.ringBytes(s.copySize(), 0)
				if i == 0 {
					first = n
				}
				if n < 2*s.maxRecord() {
					t.Fatalf("thread %d: ring of %d bytes holds fewer than two %d-byte records", i, n, s.maxRecord())
				}
				s.ringTotal += n
				s.live[i] = &thread{}
			}
			if first != tc.want {
				t.Errorf("first ring %d KiB, want %d KiB", first>>10, tc.want>>10)
			}
			if bound := max(ringBudget, tc.threads*s.pow2Pages(2*s.maxRecord())); s.ringTotal > bound {
				t.Errorf("%d threads' rings take %d MiB, more than %d MiB", tc.threads, s.ringTotal>>20, bound>>20)
			}
		})
	}
}

// TestLateReaderLosesNothing: a single spinning thread sampled as a
// capture samples it (997 Hz, off-CPU too, 16 KiB stack copies on and
// off the CPU) loses no record while the reader is late (held off here;
// a loaded machine does that to it) until the thread has written 60 or
// more records — a sample per ms of CPU, a switch-out sample each time
// it was preempted or slept — within RingHold: its ring holds RingHold
// of records at the rates it is sized for. The former 512 KiB ring held
// 29 such records.
func TestLateReaderLosesNothing(t *testing.T) {
	testutil.RequirePerf(t)
	tg := startTarget(t, "spin", "-threads", "1", "-depth", "4")
	s := mustStart(t, Config{PID: tg.Pid, Freq: 997, OffCPU: true, Kernel: true, DumpOnCPU: 16 << 10, DumpOffCPU: 16 << 10})
	rec := s.StartRecording()
	cpu0, runs0 := activity(t, tg.Pid)
	start := time.Now()
	s.mu.Lock() // the reader waits for it
	records := 0
	for time.Since(start) < RingHold && records < 60 {
		time.Sleep(2 * time.Millisecond)
		cpu, runs := activity(t, tg.Pid)
		records = int((cpu-cpu0)/time.Millisecond) + int(runs-runs0)
	}
	held := time.Since(start)
	s.mu.Unlock()
	rec.Stop()
	st := rec.Stats()
	t.Logf("reader held off for %v, the target wrote ~%d records meanwhile: %d samples, %d off-CPU intervals in all, %d lost records, rings %d KiB",
		held, records, st.Samples, st.OffCPUIntervals, st.LostRecords, s.Stats().RingBytes>>10)
	if st.LostRecords > 0 || st.LostSamples > 0 {
		t.Errorf("%d records and %d samples lost", st.LostRecords, st.LostSamples)
	}
}

// activity is pid's CPU time and how many times its threads were put on
// a CPU (schedstat's timeslices: a switch-in each, so a switch-out
// before it).
func activity(t *testing.T, pid int) (cpu time.Duration, runs uint64) {
	tids, err := procfs.Threads(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		if ss, err := procfs.ReadSchedstat(pid, tid); err == nil {
			cpu += time.Duration(ss.RunNanos)
			runs += ss.Slices
		}
	}
	return cpu, runs
}
