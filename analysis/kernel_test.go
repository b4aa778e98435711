package analysis

import (
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/model"
)

// kernelScene is a scene with a kernel context over its stall window.
func kernelScene(k model.KernelContext, samples []model.Sample, threads []model.Thread) scene {
	k.Start, k.End, k.Duration = trigger, trigger.Add(window), window
	return scene{samples: samples, threads: threads, info: func(i *model.Info) { i.KernelContext = &k }}
}

func findingKind(fs []model.Finding, k model.FindingKind) (model.Finding, bool) {
	for _, f := range fs {
		if f.Kind == k {
			return f, true
		}
	}
	return model.Finding{}, false
}

// Two threads that spin in short bursts and wait, runnable, the rest of
// the window: what a quota and a busy host both look like from the
// samples alone.
var heldSamples = []model.Sample{
	on(1, 300*time.Millisecond, spinStack), off(1, 9700*time.Millisecond, true, spinStack),
	on(2, 250*time.Millisecond, spinStack), off(2, 9750*time.Millisecond, true, spinStack),
}

func TestThrottlingFindings(t *testing.T) {
	quota := model.Throttling{Path: "/kubepods/pod1/ctr", Own: true, Limited: true, Quota: 5 * time.Millisecond, Period: 100 * time.Millisecond,
		Periods: 100, Throttled: 97, ThrottledTime: 19 * time.Second}
	t.Run("own quota", func(t *testing.T) {
		fs := kernelScene(model.KernelContext{Throttling: []model.Throttling{quota}}, heldSamples, nil).findings()
		if len(fs) == 0 || fs[0].Kind != model.FindingCPUThrottled {
			t.Fatalf("findings %s: want cpu_throttled first", kinds(fs))
		}
		f := fs[0]
		for _, want := range []string{"its cgroup /kubepods/pod1/ctr", "5ms of CPU every 100ms (0.05 CPU)", "97 of 100 periods (97%)"} {
			if !strings.Contains(f.Summary, want) {
				t.Errorf("summary %q lacks %q", f.Summary, want)
			}
		}
		if f.Severity != model.SeverityCritical || !strings.Contains(f.Detail, "Raise the limit (cpu.cfs_quota_us of /kubepods/pod1/ctr") ||
			!strings.Contains(f.Detail, "by the quota, not by the host") || len(f.TIDs) != 2 {
			t.Errorf("%+v", f)
		}
		if _, ok := findingKind(fs, model.FindingCPUStarvation); ok {
			t.Errorf("CPU starvation said where the quota explains the wait: %s", kinds(fs))
		}
	})
	t.Run("a parent's quota", func(t *testing.T) {
		own := model.Throttling{Path: "/kubepods/pod1/ctr", Own: true}
		parent := quota
		parent.Path, parent.Own, parent.V2 = "/kubepods/pod1", false, true
		fs := kernelScene(model.KernelContext{Throttling: []model.Throttling{own, parent}}, heldSamples, nil).findings()
		f, ok := findingKind(fs, model.FindingCPUThrottled)
		if !ok || !strings.Contains(f.Summary, "the cgroup /kubepods/pod1, above its own (/kubepods/pod1/ctr)") || !strings.Contains(f.Detail, "cpu.max of /kubepods/pod1") {
			t.Errorf("findings %s: %+v", kinds(fs), f)
		}
	})
	t.Run("a quota that did not throttle", func(t *testing.T) {
		idle := quota
		idle.Throttled, idle.ThrottledTime = 3, 10*time.Millisecond
		fs := kernelScene(model.KernelContext{Throttling: []model.Throttling{idle}}, heldSamples, nil).findings()
		if _, ok := findingKind(fs, model.FindingCPUThrottled); ok {
			t.Errorf("throttled in 3%% of periods, yet a throttling finding: %s", kinds(fs))
		}
		f, ok := findingKind(fs, model.FindingCPUStarvation)
		if !ok || !strings.Contains(f.Detail, "throttled it in 3 of 100 periods only") || strings.Contains(f.Detail, "cgroup cpu.max") {
			t.Errorf("starvation without the quota as a cause: %+v", f)
		}
	})
	t.Run("no quota", func(t *testing.T) {
		fs := kernelScene(model.KernelContext{Throttling: []model.Throttling{{Path: "/", Own: true}}, Host: model.HostCPU{CPUs: 2, Ticks: 2000}}, heldSamples, nil).findings()
		f, ok := findingKind(fs, model.FindingCPUStarvation)
		if !ok || !strings.Contains(f.Detail, "no CPU quota is set on its cgroups") || !strings.Contains(f.Detail, "no steal") || strings.Contains(f.Detail, "cpu.max") {
			t.Errorf("findings %s; starvation %+v", kinds(fs), f)
		}
	})
	t.Run("no kernel context", func(t *testing.T) {
		fs := scene{samples: heldSamples}.findings()
		f, ok := findingKind(fs, model.FindingCPUStarvation)
		if !ok || !strings.Contains(f.Detail, "cpu.max") {
			t.Errorf("without the kernel's numbers a quota is one of the causes: %+v", f)
		}
	})
}

func TestStealFinding(t *testing.T) {
	k := model.KernelContext{Host: model.HostCPU{CPUs: 4, Steal: 0.35, Busy: 0.6, Ticks: 4000}}
	fs := kernelScene(k, heldSamples, nil).findings()
	f, ok := findingKind(fs, model.FindingCPUSteal)
	if !ok || !strings.Contains(f.Summary, "35%") || !strings.Contains(f.Summary, "4 virtual CPUs") {
		t.Fatalf("findings %s: %+v", kinds(fs), f)
	}
	if s, ok := findingKind(fs, model.FindingCPUStarvation); !ok || !strings.Contains(s.Detail, "the hypervisor took 35%") {
		t.Errorf("starvation should name the steal: %+v", s)
	}
	// A process that wanted no CPU is not hurt by steal.
	idle := []model.Sample{off(1, 10*time.Second, false, idleStack)}
	if fs := kernelScene(k, idle, nil).findings(); len(fs) > 0 {
		if _, ok := findingKind(fs, model.FindingCPUSteal); ok {
			t.Errorf("steal said of a process that slept: %s", kinds(fs))
		}
	}
}

var (
	memcgReclaim = stack(at(mKernel, "shrink_folio_list"), at(mKernel, "shrink_node"), at(mKernel, "do_try_to_free_pages"),
		at(mKernel, "try_to_free_mem_cgroup_pages"), at(mKernel, "try_charge_memcg"), at(mKernel, "filemap_fault"),
		at(mKernel, "exc_page_fault"), at(mApp, "touch_pages"), at(mApp, "main"))
	pageRead = stack(at(mKernel, "folio_wait_bit_common"), at(mKernel, "filemap_read_folio"), at(mKernel, "filemap_fault"),
		at(mKernel, "exc_page_fault"), at(mApp, "touch_pages"), at(mApp, "main"))
	directReclaim = stack(at(mKernel, "shrink_node"), at(mKernel, "do_try_to_free_pages"), at(mKernel, "try_to_free_pages"),
		at(mKernel, "__alloc_pages_slowpath"), at(mKernel, "__alloc_pages"), at(mApp, "alloc"), at(mApp, "main"))
	dirty = stack(at(mKernel, "io_schedule_timeout"), at(mKernel, "balance_dirty_pages"), at(mKernel, "balance_dirty_pages_ratelimited_flags"),
		at(mKernel, "generic_perform_write"), at(mLibc, "write"), at(mApp, "save"), at(mApp, "main"))
	fsync = stack(at(mKernel, "jbd2_log_wait_commit"), at(mKernel, "ext4_sync_file"), at(mLibc, "fsync"), at(mApp, "save"), at(mApp, "main"))
)

func TestMemoryFindings(t *testing.T) {
	limited := model.KernelContext{
		Memory:  []model.MemoryCgroup{{Path: "/app", Own: true, Limited: true, Limit: 8 << 20, Usage: 8 << 20, Failcnt: 206}},
		Threads: []model.ThreadCounts{{TID: 1, MajorFaults: 2141}},
	}
	samples := []model.Sample{
		on(1, 900*time.Millisecond, memcgReclaim), off(1, 6*time.Second, false, pageRead), on(1, 100*time.Millisecond, spinStack),
	}
	t.Run("limit reclaim", func(t *testing.T) {
		fs := kernelScene(limited, samples, nil).findings()
		f, ok := findingKind(fs, model.FindingMemoryPressure)
		if !ok {
			t.Fatalf("no memory finding: %s", kinds(fs))
		}
		for _, want := range []string{"reclaim at its memory cgroup's limit 900ms (try_to_free_mem_cgroup_pages)", "faults reading back pages reclaim took 6s (filemap_fault)"} {
			if !strings.Contains(f.Summary, want) {
				t.Errorf("summary %q lacks %q", f.Summary, want)
			}
		}
		if !strings.Contains(f.Detail, "its memory cgroup /app hit its limit 206 times (limit 8.0 MiB") || !strings.Contains(f.Detail, "2141 major faults") ||
			!strings.Contains(f.Detail, "raise the limit (memory.max, memory.limit_in_bytes") || f.Severity != model.SeverityCritical {
			t.Errorf("%+v", f)
		}
		if len(f.Functions) != 2 || f.Functions[0] != "filemap_fault" || f.Functions[1] != "try_to_free_mem_cgroup_pages" {
			t.Errorf("functions %q", f.Functions)
		}
		if _, ok := findingKind(fs, model.FindingIOPressure); ok {
			t.Errorf("pages read back after reclaim said to be I/O as well: %s", kinds(fs))
		}
	})
	t.Run("a file read the first time", func(t *testing.T) {
		// No limit hit, no reclaim counted: faults that read a mapped
		// file are I/O, not memory pressure.
		cold := []model.Sample{off(1, 6*time.Second, false, pageRead), on(1, 100*time.Millisecond, spinStack)}
		fs := kernelScene(model.KernelContext{Memory: []model.MemoryCgroup{{Path: "/app", Own: true}}}, cold, nil).findings()
		if _, ok := findingKind(fs, model.FindingMemoryPressure); ok {
			t.Errorf("memory pressure said without reclaim: %s", kinds(fs))
		}
		if _, ok := findingKind(fs, model.FindingIOPressure); !ok {
			t.Errorf("6 s of 10 blocked reading a mapped file, and no I/O finding: %s", kinds(fs))
		}
	})
	t.Run("direct reclaim and writeback", func(t *testing.T) {
		k := model.KernelContext{Reclaim: model.Reclaim{AllocStalls: 40}}
		fs := kernelScene(k, []model.Sample{on(1, 2*time.Second, directReclaim), off(2, 3*time.Second, false, dirty)}, nil).findings()
		f, ok := findingKind(fs, model.FindingMemoryPressure)
		if !ok || !strings.Contains(f.Summary, "writeback throttling 3s (balance_dirty_pages") || !strings.Contains(f.Summary, "direct reclaim 2s (try_to_free_pages)") ||
			!strings.Contains(f.Detail, "40 allocations stalled in direct reclaim") || !strings.Contains(f.Detail, "faster than the disk writes them back") {
			t.Errorf("findings %s: %+v", kinds(fs), f)
		}
	})
	t.Run("no pressure", func(t *testing.T) {
		fs := kernelScene(limited, []model.Sample{on(1, 9*time.Second, spinStack)}, nil).findings()
		if _, ok := findingKind(fs, model.FindingMemoryPressure); ok {
			t.Errorf("memory pressure said of threads that never waited for memory: %s", kinds(fs))
		}
	})
}

func TestIOFinding(t *testing.T) {
	k := model.KernelContext{
		Disks:    []model.Disk{{Name: "vda", Major: 254, Busy: 0.93, WriteBytes: 300 << 20, Writes: 4000, Wait: 12 * time.Millisecond}},
		Pressure: []model.Pressure{{Scope: "host", Resource: "io", Some: model.PressureStall{Share: 0.7}, Full: &model.PressureStall{Share: 0.4}}},
	}
	saver := thread(1, "saver", 'D', at(mApp, "save"))
	saver.Wait = &model.Wait{Kind: "fd", On: &model.WaitTarget{FD: 5, Kind: "file", Path: "/var/lib/app/journal", Device: "vda", DevMajor: 254}}
	fs := kernelScene(k, []model.Sample{off(1, 8*time.Second, false, fsync), on(1, time.Second, spinStack)}, []model.Thread{saver}).findings()
	f, ok := findingKind(fs, model.FindingIOPressure)
	if !ok {
		t.Fatalf("no I/O finding: %s", kinds(fs))
	}
	for _, want := range []string{"1 thread blocked on I/O on /var/lib/app/journal (vda)", "8s (80%) in jbd2_log_wait_commit"} {
		if !strings.Contains(f.Summary, want) {
			t.Errorf("summary %q lacks %q", f.Summary, want)
		}
	}
	if !strings.Contains(f.Detail, "The busiest disk, vda, had I/O in flight 93% of the window") || !strings.Contains(f.Detail, "some 70% of the window, full 40%") {
		t.Errorf("detail %q", f.Detail)
	}
}

func TestOOMFinding(t *testing.T) {
	k := model.KernelContext{Memory: []model.MemoryCgroup{{Path: "/app", Own: true, Limited: true, Limit: 16 << 20, OOMKills: 1}}, OOMKills: 1}
	fs := kernelScene(k, []model.Sample{on(1, time.Second, spinStack)}, nil).findings()
	if len(fs) == 0 || fs[0].Kind != model.FindingOOMKill || fs[0].Severity != model.SeverityCritical || !strings.Contains(fs[0].Summary, "1 process in its memory cgroup /app") {
		t.Errorf("findings %s: %+v", kinds(fs), fs)
	}
	k.Memory[0].OOMKills = 0
	fs = kernelScene(k, []model.Sample{on(1, time.Second, spinStack)}, nil).findings()
	if f, ok := findingKind(fs, model.FindingOOMKill); !ok || f.Severity != model.SeverityInfo || !strings.Contains(f.Summary, "outside the process's memory cgroup") {
		t.Errorf("a kill elsewhere on the host: %+v", f)
	}
}

func TestBlockedOnPeerFinding(t *testing.T) {
	pipeWriter := thread(1, "writer", 'S', at(mLibc, "write"), at(mApp, "log"))
	pipeWriter.Syscall = &model.Syscall{Nr: 1, Name: "write"}
	pipeWriter.OffCPUFor, pipeWriter.OffCPUKnown = 45*time.Second, true
	pipeWriter.Wait = &model.Wait{Kind: "fd", On: &model.WaitTarget{FD: 7, Kind: "pipe", Desc: "pipe:[4411] read by pid 812 (logger), which is stopped",
		Peers: []model.WaitPeer{{PID: 812, Name: "logger", State: "stopped"}}}}
	client := func(tid int, local string) model.Thread {
		th := thread(tid, "client", 'S', at(mLibc, "recv"), at(mApp, "query"))
		th.Syscall = &model.Syscall{Nr: 45, Name: "recvfrom"}
		th.OffCPUFor, th.OffCPUKnown = 12*time.Second, true
		th.Wait = &model.Wait{Kind: "fd", On: &model.WaitTarget{FD: tid, Kind: "socket", Proto: "TCP", Local: local, Remote: "10.0.0.5:5432", State: "ESTABLISHED",
			Desc:  "TCP 10.0.0.5:5432 (ESTABLISHED, 0 bytes queued; from " + local + ") — pid 900 (postgres), sleeping",
			Peers: []model.WaitPeer{{PID: 900, Name: "postgres", State: "sleeping"}}}}
		return th
	}
	idle := thread(4, "loop", 'S', at(mLibc, "epoll_wait"))
	idle.OffCPUFor, idle.OffCPUKnown = 20*time.Second, true
	idle.Wait = &model.Wait{Kind: "poll", On: &model.WaitTarget{Kind: "epoll", Peers: []model.WaitPeer{{PID: 900}}}}
	short := client(5, "10.0.0.7:40199")
	short.OffCPUFor = time.Second // not most of the window
	sc := scene{threads: []model.Thread{pipeWriter, client(2, "10.0.0.7:40122"), client(3, "10.0.0.7:40124"), idle, short}, samples: []model.Sample{on(9, time.Second, spinStack)}}
	fs := sc.findings()
	if len(fs) == 0 || fs[0].Kind != model.FindingBlockedOnPeer || fs[0].Severity != model.SeverityCritical {
		t.Fatalf("findings %s: want the stopped peer first", kinds(fs))
	}
	want := `Thread 1 "writer" blocked 45s in write on pipe:[4411] read by pid 812 (logger), which is stopped.`
	if fs[0].Summary != want || !strings.Contains(fs[0].Detail, "kill -CONT 812") {
		t.Errorf("%q\nwant %q\n(detail %q)", fs[0].Summary, want, fs[0].Detail)
	}
	var pg model.Finding
	for _, f := range fs {
		if f.Kind == model.FindingBlockedOnPeer && strings.Contains(f.Summary, "postgres") {
			pg = f
		}
	}
	if pg.Summary != "2 threads blocked in recvfrom on TCP 10.0.0.5:5432 — pid 900 (postgres), the longest 12s: tid 2 \"client\", tid 3 \"client\"." ||
		pg.Severity != model.SeverityWarning || !strings.Contains(pg.Detail, "stallwatch snapshot -p 900") {
		t.Errorf("the threads on one server are one finding, the event loop and the short wait none: %+v", pg)
	}
}
