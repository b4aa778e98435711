package sampler

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

func startTarget(t *testing.T, name string, args ...string) *testutil.Target {
	t.Helper()
	tg := testutil.Start(t, target(t, name), args...)
	tg.WaitLine(t, "ready", 30*time.Second)
	return tg
}

func mustStart(t *testing.T, cfg Config) *Sampler {
	t.Helper()
	s, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func tidsNamed(s *Sampler, prefix string) map[int32]bool {
	out := map[int32]bool{}
	for _, ti := range s.Threads() {
		if strings.HasPrefix(ti.Name, prefix) {
			out[int32(ti.TID)] = true
		}
	}
	return out
}

var hotChain = regexp.MustCompile(`^main\.spinHot( main\.spinMiddle){3,4} main\.spinWorker `)

// The Go spinner's hot function holds its threads' CPU samples, with its
// callers beneath it: the callchains are whole and the addresses right.
func TestOnCPUSpinner(t *testing.T) {
	testutil.RequirePerf(t)
	tg := startTarget(t, "spin", "-threads", "3", "-depth", "3")
	s := mustStart(t, Config{PID: tg.Pid, Freq: 997, Kernel: true})
	rec := s.StartRecording()
	time.Sleep(1500 * time.Millisecond)
	samples := rec.Stop()
	spinners := tidsNamed(s, "spin-")
	if len(spinners) != 3 {
		t.Fatalf("threads named spin-*: %v, want 3 (threads: %+v)", spinners, s.Threads())
	}
	st := loadSymtab(t, tg.Pid, target(t, "spin"))
	var total, hot int
	for _, smp := range samples {
		if smp.Kind != OnCPU || !spinners[smp.TID] {
			continue
		}
		total++
		if smp.Time < rec.Start() || smp.Time > rec.End() {
			t.Errorf("sample at %d outside the recording [%d, %d]", smp.Time, rec.Start(), rec.End())
		}
		if smp.Weight != periodOf(997) {
			t.Errorf("weight %d, want %d", smp.Weight, periodOf(997))
		}
		names := st.userNames(smp)
		if len(names) == 0 || names[0] != "main.spinHot" {
			continue
		}
		// spinHot keeps no frame of its own (a Go leaf), so a frame
		// pointer walk skips the innermost spinMiddle: 3 of the 4 show.
		chain := strings.Join(names, " ")
		if !hotChain.MatchString(chain) {
			t.Logf("spinHot without its callers: %s", chain)
			continue
		}
		hot++
	}
	if total < 300 {
		t.Fatalf("%d on-CPU samples of the spinning threads in 1.5 s at 997 Hz; want at least 300", total)
	}
	if frac := float64(hot) / float64(total); frac < 0.9 {
		t.Errorf("main.spinHot with its callers in %d of %d samples (%.0f%%), want >= 90%%", hot, total, 100*frac)
	}
	t.Logf("%d samples, %d in spinHot with callers; stats %+v", total, hot, s.Stats())
}
