package model

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestKernelContextJSON: capture.json's kernel_context reads back as it
// was written, under the names the package doc gives, and a PSI line
// without "full" stays without one.
func TestKernelContextJSON(t *testing.T) {
	full := PressureStall{Stalled: 40 * time.Millisecond, Share: 0.04, Avg10: 3.5}
	k := &KernelContext{
		Start: time.Date(2026, 1, 5, 14, 30, 0, 0, time.UTC), End: time.Date(2026, 1, 5, 14, 30, 1, 0, time.UTC), Duration: time.Second,
		Cgroups:    []Cgroup{{Hierarchy: "cpu,cpuacct", Path: "/kubepods/pod1"}},
		Throttling: []Throttling{{Path: "/kubepods/pod1", Own: true, Limited: true, Quota: 20 * time.Millisecond, Period: 100 * time.Millisecond, Periods: 10, Throttled: 9, ThrottledTime: 700 * time.Millisecond}},
		Pressure:   []Pressure{{Scope: "host", Resource: "cpu", Some: PressureStall{Stalled: time.Millisecond}}, {Scope: "host", Resource: "memory", Full: &full}},
		Host:       HostCPU{CPUs: 2, Steal: 0.25, Busy: 0.5, Ticks: 200},
		OOMKills:   1,
		Reclaim:    Reclaim{AllocStalls: 3, SwapIns: 5},
		Disks:      []Disk{{Name: "vda", Major: 254, Busy: 0.9, WriteBytes: 1 << 20, Wait: 3 * time.Millisecond}},
		Memory:     []MemoryCgroup{{Path: "/kubepods/pod1", Own: true, Limited: true, Limit: 1 << 24, Usage: 1 << 23, Failcnt: 9}},
		Threads:    []ThreadCounts{{TID: 7, MajorFaults: 12, Involuntary: 4}},
		Notes:      []string{"a note"},
	}
	b, err := json.Marshal(&Info{KernelContext: k})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`"kernel_context":`, `"throttled_periods":9`, `"quota_ns":20000000`, `"host_cpu":`, `"steal":0.25`, `"failcnt":9`, `"involuntary_switches":4`} {
		if !strings.Contains(string(b), name) {
			t.Errorf("capture.json lacks %s: %s", name, b)
		}
	}
	var back Info
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.KernelContext, k) {
		t.Errorf("read back:\n%+v\nwant\n%+v", back.KernelContext, k)
	}
	if back.KernelContext.Pressure[0].Full != nil {
		t.Errorf("a line without full read back with one")
	}
	if s := k.Throttling[0].Share(); s != 0.9 {
		t.Errorf("share %v", s)
	}
}
