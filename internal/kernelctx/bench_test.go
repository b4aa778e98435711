package kernelctx

import (
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// BenchmarkRead: one reading of a 1,000-thread process, with its
// threads' counters (what a capture takes at its start and end) and
// without (cgroups, PSI, /proc/stat and /proc/vmstat alone).
func BenchmarkRead(b *testing.B) {
	bin := testutil.BuildC(b, "manythreads/manythreads.c")
	tg := testutil.Start(b, bin, "1000")
	tg.WaitLine(b, "ready", 60*time.Second)
	for _, threads := range []bool{false, true} {
		b.Run(map[bool]string{false: "host+cgroups", true: "with-1000-threads"}[threads], func(b *testing.B) {
			r := NewReader(tg.Pid)
			for b.Loop() {
				if _, err := r.Read(threads); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
