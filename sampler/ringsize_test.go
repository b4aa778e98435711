package sampler

import (
	"testing"
	"time"

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
				n := s.ringBytes()
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
// off the CPU) loses no record while the reader is late by 150 ms of the
// thread's CPU time (held off here; a loaded machine does that to it):
// its ring holds RingHold of records. With the former 512 KiB ring (29
// such records) this lost records every time.
func TestLateReaderLosesNothing(t *testing.T) {
	testutil.RequirePerf(t)
	tg := startTarget(t, "spin", "-threads", "1", "-depth", "4")
	s := mustStart(t, Config{PID: tg.Pid, Freq: 997, OffCPU: true, Kernel: true, DumpOnCPU: 16 << 10, DumpOffCPU: 16 << 10})
	rec := s.StartRecording()
	s.mu.Lock() // the reader waits for it
	used := testutil.WaitCPU(t, tg.Pid, 150*time.Millisecond, 10*time.Second)
	s.mu.Unlock()
	rec.Stop()
	st := rec.Stats()
	t.Logf("reader held off for %v of the target's CPU: %d samples, %d off-CPU intervals, %d lost records, rings %d KiB",
		used, st.Samples, st.OffCPUIntervals, st.LostRecords, s.Stats().RingBytes>>10)
	if st.LostRecords > 0 || st.LostSamples > 0 {
		t.Errorf("%d records and %d samples lost", st.LostRecords, st.LostSamples)
	}
	if st.Samples < 50 {
		t.Errorf("%d samples in %v of CPU at 997 Hz", st.Samples, used)
	}
}
