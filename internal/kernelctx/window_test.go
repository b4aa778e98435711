package kernelctx

import (
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/model"
)

func cpuGroup(path string, quota time.Duration, periods, throttled uint64, tt time.Duration) CPUGroup {
	q := Quota{Period: 100 * time.Millisecond}
	if quota > 0 {
		q.Limited, q.Quota = true, quota
	}
	return CPUGroup{Dir: Dir{Path: path, FS: "/sys/fs/cgroup/cpu" + path}, Quota: q,
		Stat: CPUStat{Bandwidth: true, Periods: periods, Throttled: throttled, ThrottledTime: tt}}
}

func TestBetween(t *testing.T) {
	a := &Reading{
		Mono: 1e9,
		CPU: []CPUGroup{
			cpuGroup("/pod/ctr", 0, 0, 0, 0),
			cpuGroup("/pod", 50*time.Millisecond, 100, 10, time.Second),
			cpuGroup("/", 0, 0, 0, 0),
		},
		Memory:   []MemGroup{{Dir: Dir{Path: "/pod/ctr", FS: "/m/pod/ctr"}, Mem: MemCounters{Limited: true, Limit: 1 << 24, Failcnt: 5}}},
		Host:     &Pressures{Memory: PSI{Some: Stall{Total: time.Second}, Full: Stall{Total: time.Second}, HasFull: true}},
		CPUTimes: CPUTimes{User: 100, Idle: 100, Steal: 0, CPUs: 2},
		VM:       VMStat{OOMKills: 1, AllocStalls: 3},
		Threads:  []ThreadCounters{{TID: 1, MajorFaults: 2}, {TID: 2, Involuntary: 5}, {TID: 3}},
	}
	b := &Reading{
		Mono: 3e9,
		CPU: []CPUGroup{
			cpuGroup("/pod/ctr", 0, 0, 0, 0),
			cpuGroup("/pod", 50*time.Millisecond, 120, 28, 2500*time.Millisecond),
			cpuGroup("/", 0, 0, 0, 0),
		},
		Memory:   []MemGroup{{Dir: Dir{Path: "/pod/ctr", FS: "/m/pod/ctr"}, Mem: MemCounters{Limited: true, Limit: 1 << 24, Usage: 1 << 23, Failcnt: 9}}},
		Host:     &Pressures{Memory: PSI{Some: Stall{Total: 1500 * time.Millisecond, Avg10: 30}, Full: Stall{Total: 1200 * time.Millisecond}, HasFull: true}},
		CPUTimes: CPUTimes{User: 250, Idle: 200, Steal: 50, CPUs: 2},
		VM:       VMStat{OOMKills: 2, AllocStalls: 3},
		Threads:  []ThreadCounters{{TID: 1, MajorFaults: 12}, {TID: 2, Involuntary: 9}, {TID: 3}, {TID: 4, MajorFaults: 1}},
	}
	w := Between(a, b)
	if w.Duration != 2*time.Second {
		t.Errorf("duration %v", w.Duration)
	}
	if len(w.Throttling) != 2 || !w.Throttling[0].Own || w.Throttling[0].Limited || w.Throttling[1].Path != "/pod" {
		t.Fatalf("throttling %+v: want the own cgroup, then /pod (the root has no quota)", w.Throttling)
	}
	if p := w.Throttling[1]; p.Periods != 20 || p.Throttled != 18 || p.ThrottledTime != 1500*time.Millisecond || p.Share() != 0.9 {
		t.Errorf("/pod: %+v (share %v)", p, p.Share())
	}
	if len(w.Memory) != 1 || w.Memory[0].Failcnt != 4 || w.Memory[0].Usage != 1<<23 {
		t.Errorf("memory %+v", w.Memory)
	}
	if len(w.Pressure) != 3 || w.Pressure[1].Resource != "memory" || w.Pressure[1].Some.Stalled != 500*time.Millisecond ||
		w.Pressure[1].Some.Share != 0.25 || w.Pressure[1].Full.Stalled != 200*time.Millisecond || w.Pressure[1].Some.Avg10 != 30 {
		t.Errorf("pressure %+v", w.Pressure)
	}
	if w.Host.Ticks != 300 || w.Host.Steal != 50.0/300 || w.Host.Busy != 150.0/300 {
		t.Errorf("host %+v", w.Host)
	}
	if w.OOMKills != 1 || w.Reclaim.AllocStalls != 0 {
		t.Errorf("OOM kills %d, reclaim %+v", w.OOMKills, w.Reclaim)
	}
	want := []model.ThreadCounts{{TID: 1, MajorFaults: 10}, {TID: 4, MajorFaults: 1}, {TID: 2, Involuntary: 4}}
	if len(w.Threads) != 3 || w.Threads[0] != want[0] || w.Threads[1] != want[1] || w.Threads[2] != want[2] {
		t.Errorf("threads %+v, want %+v (a thread whose counters did not move left out, a new one from zero)", w.Threads, want)
	}
	if len(w.Notes) != 0 {
		t.Errorf("notes %q", w.Notes)
	}
}

func TestBetweenResetAndMove(t *testing.T) {
	a := &Reading{Mono: 1, CPU: []CPUGroup{cpuGroup("/a", 10*time.Millisecond, 50, 40, time.Second)}}
	b := &Reading{Mono: 2, CPU: []CPUGroup{cpuGroup("/a", 10*time.Millisecond, 5, 4, time.Millisecond)}}
	w := Between(a, b)
	if len(w.Throttling) != 0 || len(w.Notes) != 1 || !strings.Contains(w.Notes[0], "made anew") {
		t.Errorf("counters that went down: throttling %+v, notes %q", w.Throttling, w.Notes)
	}
	b.CPU = []CPUGroup{cpuGroup("/b", 10*time.Millisecond, 5, 4, time.Millisecond)}
	w = Between(a, b)
	if len(w.Throttling) != 0 || len(w.Notes) != 1 || !strings.Contains(w.Notes[0], "not the process's at the window's start") {
		t.Errorf("a process moved to another cgroup: throttling %+v, notes %q", w.Throttling, w.Notes)
	}
	// No thread counters at the start: no thread deltas (a thread's
	// totals since it began are not the window's).
	a.Threads, b.Threads = nil, []ThreadCounters{{TID: 1, MajorFaults: 100}}
	if w := Between(a, b); len(w.Threads) != 0 {
		t.Errorf("threads %+v without a reading at the start", w.Threads)
	}
}
