package sampler

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
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

// schedFrames are the scheduler's own frames at the top of a switch-out
// callchain; the wait function is the first frame below them.
var schedFrames = regexp.MustCompile(`^(__schedule|schedule|schedule_.*|__perf_event_task_sched_out|perf_event_task_sched_out|preempt_schedule.*|io_schedule.*|__traceiter.*)$`)

// waitFunc returns the first kernel frame that is not the scheduler's.
func waitFunc(t *testing.T, smp Sample) string {
	t.Helper()
	tab := kallsymsTable(t)
	for _, a := range smp.Stack[:smp.Kernel] {
		sym, ok := tab.Lookup(a)
		if !ok {
			return fmt.Sprintf("%#x", a)
		}
		if !schedFrames.MatchString(sym.Name) {
			return sym.Name
		}
	}
	return ""
}

// Threads blocked for the whole recording are off-CPU for all of it, on
// a stack with the kernel's wait function on top; a thread that naps 1 ms
// at a time is seen leaving the CPU with its user registers and stack.
func TestOffCPUBlockedThreads(t *testing.T) {
	testutil.RequirePerf(t)
	tg := testutil.Start(t, target(t, "offcpu/offcpu.c"), "-n", "1")
	roles := map[string]int32{}
	for len(roles) < 3 {
		line := tg.WaitLine(t, "", 30*time.Second)
		var role string
		var tid int32
		if _, err := fmt.Sscanf(line, "%s %d", &role, &tid); err == nil {
			roles[role] = tid
		}
	}
	tg.WaitLine(t, "ready", 30*time.Second)
	s := mustStart(t, Config{PID: tg.Pid, Freq: 997, OffCPU: true, Kernel: true})
	rec := s.StartRecording()
	time.Sleep(1500 * time.Millisecond)
	samples := rec.Stop()
	span := rec.End() - rec.Start()

	off := map[int32]uint64{}
	top := map[int32]map[string]uint64{}
	var napperDumps, napperIntervals int
	for _, smp := range samples {
		if smp.Kind != OffCPU {
			continue
		}
		off[smp.TID] += smp.Weight
		if top[smp.TID] == nil {
			top[smp.TID] = map[string]uint64{}
		}
		top[smp.TID][waitFunc(t, smp)] += smp.Weight
		if smp.TID == roles["napper"] {
			napperIntervals++
			if len(smp.StackDump) > 0 && smp.Regs.SP != 0 && smp.Regs.IP != 0 {
				napperDumps++
			}
		}
	}
	want := map[string][]string{
		"sleeper": {"do_nanosleep", "hrtimer_nanosleep"},
		"piper":   {"pipe_read", "anon_pipe_read"}, // renamed in 6.15
		"napper":  {"do_nanosleep", "hrtimer_nanosleep"},
	}
	for role, funcs := range want {
		tid := roles[role]
		frac := float64(off[tid]) / float64(span)
		if frac < 0.9 {
			t.Errorf("%s (tid %d): off-CPU %.1f%% of the recording, want >= 90%%", role, tid, 100*frac)
		}
		var onTop uint64
		for _, f := range funcs {
			onTop += top[tid][f]
		}
		if onTop < off[tid]*9/10 {
			t.Errorf("%s (tid %d): off-CPU time by top kernel function %v, want %v on top", role, tid, top[tid], funcs)
		}
		t.Logf("%s: off-CPU %.1f%% of %v, tops %v", role, 100*frac, time.Duration(span), top[tid])
	}
	if napperIntervals < 100 {
		t.Errorf("napper: %d off-CPU intervals in 1.5 s of 1 ms naps, want >= 100", napperIntervals)
	}
	if napperDumps < napperIntervals*9/10 {
		t.Errorf("napper: %d of %d intervals carry user registers and a stack dump", napperDumps, napperIntervals)
	}
	t.Logf("stats %+v", rec.Stats())
}

// churnLog collects the churn target's "start TID NS" and "end TID NS" lines.
type churnLog struct {
	mu         sync.Mutex
	start, end map[int]uint64
}

func readChurn(t *testing.T, tg *testutil.Target) *churnLog {
	cl := &churnLog{start: map[int]uint64{}, end: map[int]uint64{}}
	done := make(chan struct{})
	// Runs before testutil's cleanup, which reads stdout too.
	t.Cleanup(func() {
		_ = tg.Cmd.Process.Kill()
		<-done
	})
	go func() {
		defer close(done)
		for {
			line, err := tg.Stdout.ReadString('\n')
			var what string
			var tid int
			var ns uint64
			if n, _ := fmt.Sscanf(line, "%s %d %d", &what, &tid, &ns); n == 3 {
				cl.mu.Lock()
				if what == "start" {
					cl.start[tid] = ns
				} else {
					cl.end[tid] = ns
				}
				cl.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}()
	return cl
}

// A target that starts and ends threads all the time: every thread is
// sampled, new ones soon after they start, and the descriptors of those
// that ended are given back.
func TestChurn(t *testing.T) {
	testutil.RequirePerf(t)
	tg := startTarget(t, "churn/churn.c", "-r", "25", "-s", "10", "-p", "120")
	cl := readChurn(t, tg)
	t0 := time.Now()
	defer func() { t.Logf("test body took %v", time.Since(t0)) }()
	fd0 := testutil.OpenFDs(t)
	s, err := Start(Config{PID: tg.Pid, Freq: 997, OffCPU: true, Kernel: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Start after %v", time.Since(t0))
	attachedAt := monotime.Now()
	rec := s.StartRecording()
	time.Sleep(1500 * time.Millisecond)
	mid := testutil.OpenFDs(t)
	tasks, _ := procfs.Threads(tg.Pid)
	samples := rec.Stop()
	stopAt := rec.End()
	t.Logf("Stop after %v", time.Since(t0))

	// Descriptors follow the live threads, not all that ever ran.
	if limit := fd0 + 3 + fdsPerThread*(len(tasks)+4); mid > limit {
		t.Errorf("%d descriptors open with %d live target threads; want at most %d", mid, len(tasks), limit)
	}
	sampled := map[int]int{}
	for _, smp := range samples {
		if smp.Kind == OnCPU {
			sampled[int(smp.TID)]++
		}
	}
	infos := map[int]ThreadInfo{}
	for _, ti := range s.Threads() {
		infos[ti.TID] = ti
	}
	cl.mu.Lock()
	var checked int
	var latencies []time.Duration
	for tid, st := range cl.start {
		end, ended := cl.end[tid]
		if st < attachedAt || !ended || end > stopAt {
			continue // not wholly inside the recording
		}
		checked++
		if sampled[tid] == 0 {
			t.Errorf("thread %d (ran %v from %d) has no on-CPU sample", tid, time.Duration(end-st), st)
		}
		ti := infos[tid]
		if ti.Attached == 0 {
			t.Errorf("thread %d was never attached: %+v", tid, ti)
			continue
		}
		latencies = append(latencies, time.Duration(int64(ti.Attached)-int64(st)))
	}
	cl.mu.Unlock()
	if checked < 15 {
		t.Fatalf("only %d churn threads lived inside the recording; want >= 15", checked)
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	p90 := latencies[len(latencies)*9/10]
	if p90 > 100*time.Millisecond {
		t.Errorf("90th percentile from thread start to attach is %v, want <= 100ms (all: %v)", p90, latencies)
	}
	t.Logf("%d threads checked; start->attach median %v p90 %v max %v; fds start %d mid %d (live target threads %d)",
		checked, latencies[len(latencies)/2], p90, latencies[len(latencies)-1], fd0, mid, len(tasks))
	st := s.Stats()
	if st.ThreadsExited < checked {
		t.Errorf("Stats.ThreadsExited %d, want >= %d", st.ThreadsExited, checked)
	}
	t.Logf("Close at %v", time.Since(t0))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Closed after %v", time.Since(t0))
	if fds := testutil.OpenFDs(t); fds != fd0 {
		t.Errorf("%d descriptors open after Close, %d before Start", fds, fd0)
	}
}
