package report

import (
	"strconv"
	"time"

	"github.com/stallwatch/stallwatch/analysis"
	"github.com/stallwatch/stallwatch/model"
)

// The fixture is one stalled process, pid 4242, built as plain values of
// the types the capture package hands us: a thread spinning in an inlined
// hash function, two threads deadlocked on two mutexes, a third waiting on
// one of them, a JIT thread starved of CPU, one in D state, two idle twins.

var (
	mExe = &model.Mapping{Start: 0x400000, Limit: 0x500000, File: "/usr/bin/app", BuildID: "aa11bb22",
		Kind: model.KindNative, HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
	mLibc = &model.Mapping{Start: 0x7f1000000000, Limit: 0x7f1000200000, Offset: 0x28000,
		File: "/usr/lib/x86_64-linux-gnu/libc.so.6", BuildID: "cc33dd44", Kind: model.KindNative, HasFunctions: true}
	mKernel = &model.Mapping{Start: 0xffffffff81000000, Limit: 0xffffffff83000000, File: model.KernelMapping, Kind: model.KindKernel, HasFunctions: true}
	mJIT    = &model.Mapping{Start: 0x7f2000000000, Limit: 0x7f2000100000, File: "/tmp/jit-4242.dump", Kind: model.KindJIT, HasFunctions: true}
)

func loc(m *model.Mapping, addr uint64, lines ...model.Line) *model.Location {
	k := model.KindNative
	if m != nil {
		k = m.Kind
	}
	return &model.Location{Addr: addr, Mapping: m, Lines: lines, Kind: k}
}

func fn(name, file string, line int64) model.Line {
	return model.Line{Function: name, SystemName: name, File: file, Line: line}
}

var (
	// kernel
	kFutexWait = loc(mKernel, 0xffffffff81100010, fn("futex_wait_queue", "", 0))
	kDoFutex   = loc(mKernel, 0xffffffff81100200, fn("do_futex", "", 0))
	kEntry     = loc(mKernel, 0xffffffff82000050, fn("entry_SYSCALL_64_after_hwframe", "", 0))
	kSleep     = loc(mKernel, 0xffffffff81200040, fn("hrtimer_nanosleep", "", 0))
	kSchedule  = loc(mKernel, 0xffffffff81300000, fn("schedule", "", 0))
	kIOWait    = loc(mKernel, 0xffffffff81400000, fn("io_schedule", "", 0))
	// a kernel frame without a mapping (the symbolizer had none for it)
	kTimer = &model.Location{Addr: 0xffffffff81500000, Kind: model.KindKernel, Lines: []model.Line{fn("hrtimer_interrupt", "", 0)}}
	// libc
	lLock  = loc(mLibc, 0x7f1000010000, fn("__lll_lock_wait", "", 0))
	lSleep = loc(mLibc, 0x7f1000020000, fn("clock_nanosleep", "", 0))
	lStart = loc(mLibc, 0x7f1000030000, fn("start_thread", "", 0))
	lClone = loc(mLibc, 0x7f1000040000, fn("__clone3", "", 0))
	lPread = loc(mLibc, 0x7f1000050000, fn("pread64", "", 0))
	// the executable; hash is inlined into spin
	aSpin   = loc(mExe, 0x401000, fn("hash", "/src/app/hash.h", 30), fn("spin", "/src/app/app.c", 12))
	aWorker = loc(mExe, 0x402000, fn("worker", "/src/app/app.c", 40))
	aLockA  = loc(mExe, 0x403000, fn("lock_a", "/src/app/app.c", 50))
	aLockB  = loc(mExe, 0x404000, fn("lock_b", "/src/app/app.c", 60))
	aIdle   = loc(mExe, 0x405000, fn("idle_loop", "/src/app/app.c", 70))
	aRead   = loc(mExe, 0x406000, fn("read_block", "/src/app/app.c", 80))
	// JIT code
	jHandler = loc(mJIT, 0x7f2000000100, fn("handler", "app.js", 3))
)

func threadStart(frames ...*model.Location) []*model.Location {
	return append(frames, lStart, lClone)
}

var (
	stackSpin    = threadStart(aSpin, aWorker)
	stackLockA   = threadStart(kFutexWait, kDoFutex, kEntry, lLock, aLockA, aWorker)
	stackLockB   = threadStart(kFutexWait, kDoFutex, kEntry, lLock, aLockB, aWorker)
	stackWaiter  = threadStart(kFutexWait, kDoFutex, kEntry, lLock, aLockA, aIdle)
	stackJIT     = threadStart(kSchedule, jHandler, aWorker)
	stackSleeper = threadStart(kSleep, kEntry, lSleep, aIdle)
	stackDisk    = threadStart(kIOWait, kEntry, lPread, aRead)
)

const fixturePeriod = int64(time.Millisecond)

var fixtureStart = time.Date(2026, 1, 5, 14, 29, 42, 345e6, time.UTC)

// fixtureSamples: tid 11 spins (90 samples during, 10 before), 12 and 13
// are blocked 5 s each, 14 waited 2 s runnable (preempted) and 1 s
// blocked, 15 is in D state for 5 s; one kernel-only sample of tid 11.
func fixtureSamples() []model.Sample {
	var s []model.Sample
	for i := 0; i < 90; i++ {
		s = append(s, model.Sample{Stack: stackSpin, TID: 11, ThreadName: "spinner", Phase: model.PhaseDuring, Count: 1})
	}
	for i := 0; i < 10; i++ {
		s = append(s, model.Sample{Stack: stackSpin, TID: 11, ThreadName: "spinner", Phase: model.PhaseBefore, Count: 1})
	}
	s = append(s,
		model.Sample{Stack: []*model.Location{kTimer}, TID: 11, ThreadName: "spinner", Phase: model.PhaseDuring, Count: 1},
		model.Sample{Stack: stackLockA, TID: 12, ThreadName: "lock-a", Phase: model.PhaseDuring, OffCPU: true, Nanos: int64(5 * time.Second)},
		model.Sample{Stack: stackLockB, TID: 13, ThreadName: "lock-b", Phase: model.PhaseDuring, OffCPU: true, Nanos: int64(5 * time.Second)},
		model.Sample{Stack: stackJIT, TID: 14, ThreadName: "metrics", Phase: model.PhaseDuring, OffCPU: true, Preempted: true, Nanos: int64(2 * time.Second)},
		model.Sample{Stack: stackJIT, TID: 14, ThreadName: "metrics", Phase: model.PhaseDuring, OffCPU: true, Nanos: int64(time.Second)},
		model.Sample{Stack: stackDisk, TID: 15, ThreadName: "disk", Phase: model.PhaseDuring, OffCPU: true, Nanos: int64(5 * time.Second)},
		model.Sample{Stack: stackSleeper, TID: 12, ThreadName: "lock-a", Phase: model.PhaseBefore, OffCPU: true, Nanos: int64(300 * time.Millisecond)},
	)
	return s
}

func fixtureMeta() model.Meta {
	return model.Meta{Start: fixtureStart, Duration: 40 * time.Second, Period: fixturePeriod, Comments: []string{"stallwatch capture: trigger stall", "pid 4242"}}
}

func futexCall(addr uint64) *model.Syscall {
	return &model.Syscall{Nr: 202, Name: "futex", Args: [6]uint64{addr, 0x80, 2}, Desc: "futex(0x" + hexNoPrefix(addr) + ", FUTEX_WAIT_PRIVATE, 2)"}
}

func hexNoPrefix(v uint64) string { return strconv.FormatUint(v, 16) }

func fixtureSnapshot() *model.Snapshot {
	user := func(stack []*model.Location) []*model.Location {
		var out []*model.Location
		for _, l := range stack {
			if l.Kind != model.KindKernel {
				out = append(out, l)
			}
		}
		return out
	}
	kernel := func(stack []*model.Location) []*model.Location {
		var out []*model.Location
		for _, l := range stack {
			if l.Kind == model.KindKernel {
				out = append(out, l)
			}
		}
		return out
	}
	thread := func(tid int, name string, state byte, stack []*model.Location) model.Thread {
		return model.Thread{
			TID: tid, Name: name, State: state, Kernel: kernel(stack), User: user(stack), Unwinder: "fp",
			VoluntarySwitches: 10, InvoluntarySwitches: 2, RunqueueWait: 3 * time.Millisecond,
			Stopped: true, Stop: 400 * time.Microsecond,
		}
	}
	offcpu := func(t model.Thread, d time.Duration) model.Thread {
		t.OffCPUFor, t.OffCPUKnown, t.OffCPUSource = d, true, "sampler"
		return t
	}
	const mutexA, mutexB = 0x7ffd0010, 0x7ffd0040
	t11 := thread(11, "spinner", 'R', stackSpin)
	t11.RunqueueWait = 40 * time.Millisecond
	t12 := offcpu(thread(12, "lock-a", 'S', stackLockA), 12*time.Second)
	t12.Wchan, t12.Syscall = "futex_wait_queue", futexCall(mutexB)
	t12.Wait = &model.Wait{Kind: "mutex", Addr: mutexB, Owner: 13, Desc: "pthread mutex 0x7ffd0040 held by tid 13"}
	t13 := offcpu(thread(13, "lock-b", 'S', stackLockB), 12*time.Second)
	t13.Wchan, t13.Syscall = "futex_wait_queue", futexCall(mutexA)
	t13.Wait = &model.Wait{Kind: "mutex", Addr: mutexA, Owner: 12, Desc: "pthread mutex 0x7ffd0010 held by tid 12"}
	t14 := offcpu(thread(14, "waiter", 'S', stackWaiter), 11*time.Second)
	t14.Wchan, t14.Syscall = "futex_wait_queue", futexCall(mutexA)
	t14.Wait = &model.Wait{Kind: "mutex", Addr: mutexA, Owner: 12, Desc: "pthread mutex 0x7ffd0010 held by tid 12"}
	t15 := offcpu(thread(15, "disk", 'D', stackDisk), 9*time.Second)
	t15.Wchan = "io_schedule"
	t16 := offcpu(thread(16, "idle-1", 'S', stackSleeper), time.Second)
	t16.Wchan = "hrtimer_nanosleep"
	t17 := offcpu(thread(17, "idle-2", 'S', stackSleeper), 2*time.Second)
	t17.Wchan = "hrtimer_nanosleep"
	t18 := model.Thread{TID: 18, Name: "gone", State: 'Z', Err: model.RecordedError("task exited while read")}
	return &model.Snapshot{
		PID: 4242, Command: []string{"/usr/bin/app", "--serve"},
		Time: fixtureStart.Add(30 * time.Second), Mono: 123456789, Duration: 3 * time.Millisecond,
		Threads:    []model.Thread{t11, t12, t13, t14, t15, t16, t17, t18},
		PtraceUsed: true, MaxStop: 400 * time.Microsecond,
		Notes: []string{"off-CPU times are from the sampler: /proc/<pid>/sched is absent"},
		Locks: model.LockGraph{
			Edges: []model.Edge{
				{From: 12, To: 13, Via: "pthread mutex 0x7ffd0040"},
				{From: 13, To: 12, Via: "pthread mutex 0x7ffd0010"},
				{From: 14, To: 12, Via: "pthread mutex 0x7ffd0010"},
			},
			Cycles: [][]int{{12, 13}},
			Chains: [][]int{{14, 12}},
		},
	}
}

func fixtureInfo() model.Info {
	trig := fixtureStart.Add(30 * time.Second)
	return model.Info{
		Version: "test", Trigger: model.Stall, Reason: "no heartbeat for 10.2s", Heartbeat: "file /run/app.beat",
		PID: 4242, Command: []string{"/usr/bin/app", "--serve"}, Executable: "/usr/bin/app", Kernel: "6.1.0-test",
		Start: fixtureStart, TriggerAt: trig, End: trig.Add(10 * time.Second),
		LastBeat: trig.Add(-10200 * time.Millisecond), StallFor: 10200 * time.Millisecond,
		Counts:   model.Counts{Samples: 101, OffCPU: 6, SamplesBefore: 11, Threads: 8, JITSources: 1, Lost: 3},
		Settings: model.Settings{Freq: 997, BaselineFreq: 49, History: 30 * time.Second, CaptureFor: 10 * time.Second, OffCPU: true, Kernel: true, Ptrace: true},
		Notes:    []string{"/proc/<pid>/sched is absent: off-CPU times come from the sampler"},
	}
}

func fixtureCapture(t interface{ Fatal(...any) }) *Capture {
	p, err := BuildProfile(fixtureSamples(), fixtureMeta())
	if err != nil {
		t.Fatal(err)
	}
	return analyzed(&Capture{Info: fixtureInfo(), Profile: p, Threads: fixtureSnapshot()})
}

// analyzed gives c the findings a capture draws (package analysis), which
// the reports say.
func analyzed(c *Capture) *Capture {
	var p *model.Profile
	if c.Profile != nil {
		p = Samples(c.Profile)
	}
	analysis.Analyze(&c.Info, p, c.Threads).Into(&c.Info)
	return c
}
