package unwind

import (
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// BenchmarkUnwind: one CFI unwind of a thread waiting on a mutex in libc
// (7 frames) from a stack copy, as the snapshot does under its stop and
// the sampler's repair does per sample, beside the frame-pointer walk the
// kernel does (x-vs-fp: CFI time over FP time).
func BenchmarkUnwind(b *testing.B) {
	testutil.RequirePtrace(b)
	tg := testutil.Start(b, testutil.BuildC(b, "blocked/blocked.c"))
	tg.WaitLine(b, "ready ", 10*time.Second)
	tids, _ := procfs.Threads(tg.Pid)
	var locker int
	for _, tid := range tids {
		if name, _ := procfs.Comm(tg.Pid, tid); name == "locker" {
			locker = tid
		}
	}
	testutil.Eventually(5*time.Second, func() bool {
		sc, err := procfs.ReadSyscall(tg.Pid, locker)
		return err == nil && sc.Nr == 202
	})
	p, _ := openProcess(b, tg.Pid)
	st := ptraceStop(b, tg.Pid, locker)
	mem := DumpMemory(st.regs.SP, st.dump)
	frames := len(p.Unwind(st.regs, mem, MaxFrames))
	fpStart := time.Now()
	const fpRuns = 10000
	for i := 0; i < fpRuns; i++ {
		FramePointer().Unwind(st.regs, mem, MaxFrames)
	}
	fpPer := time.Since(fpStart) / fpRuns
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		p.Unwind(st.regs, mem, MaxFrames)
	}
	per := time.Since(start) / time.Duration(b.N)
	b.ReportMetric(float64(frames), "frames")
	b.ReportMetric(float64(per.Nanoseconds())/float64(max(fpPer.Nanoseconds(), 1)), "x-vs-fp")
}
