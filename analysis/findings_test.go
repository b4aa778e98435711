package analysis

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/model"
)

// A scene is a capture made of model values: a 10-second stall window
// (the "during" phase) of pid 100, its samples and its snapshot.
type scene struct {
	exe     string
	samples []model.Sample
	threads []model.Thread
	info    func(*model.Info)
	// noProfile: a snapshot alone.
	noProfile bool
}

const window = 10 * time.Second

var trigger = time.Date(2026, 1, 5, 14, 30, 0, 0, time.UTC)

var (
	mKernel = &model.Mapping{File: model.KernelMapping, Kind: model.KindKernel}
	mLibc   = &model.Mapping{File: "/usr/lib/x86_64-linux-gnu/libc.so.6", Kind: model.KindNative}
	mApp    = &model.Mapping{File: "/usr/bin/app", Kind: model.KindNative}
	mJIT    = &model.Mapping{File: "[jit]", Kind: model.KindJIT}
	mAnon   = &model.Mapping{File: "[anon]", Kind: model.KindUnknown}
)

func at(m *model.Mapping, name string) *model.Location {
	return &model.Location{Addr: 0x1000, Mapping: m, Kind: m.Kind, Lines: []model.Line{{Function: name}}}
}

func stack(locs ...*model.Location) []*model.Location { return locs }

var (
	spinStack   = stack(at(mApp, "spin"), at(mApp, "main"))
	lockStack   = stack(at(mKernel, "futex_wait_queue"), at(mLibc, "__lll_lock_wait"), at(mApp, "lock_a"), at(mApp, "worker"), at(mLibc, "start_thread"))
	idleStack   = stack(at(mKernel, "hrtimer_nanosleep"), at(mLibc, "clock_nanosleep"), at(mLibc, "start_thread"))
	vforkKernel = stack(at(mKernel, "schedule"), at(mKernel, "wait_for_vfork_done"), at(mKernel, "kernel_clone"), at(mKernel, "__x64_sys_vfork"))
)

// on is tid's on-CPU time in stack during the stall; off its time off the
// CPU (preempted: runnable, waiting for a CPU).
func on(tid int, d time.Duration, st []*model.Location) model.Sample {
	return model.Sample{TID: tid, Phase: model.PhaseDuring, Stack: st, Count: 1, Nanos: int64(d)}
}

func off(tid int, d time.Duration, preempted bool, st []*model.Location) model.Sample {
	return model.Sample{TID: tid, Phase: model.PhaseDuring, Stack: st, OffCPU: true, Preempted: preempted, Nanos: int64(d)}
}

func thread(tid int, name string, state byte, user ...*model.Location) model.Thread {
	return model.Thread{TID: tid, Name: name, State: state, User: user}
}

func waitsFor(t model.Thread, owner int) model.Thread {
	t.Wait = &model.Wait{Kind: "mutex", Addr: 0x7000, Owner: owner, Desc: "pthread mutex 0x7000"}
	return t
}

func joins(t model.Thread, tid int) model.Thread {
	t.Wait = &model.Wait{Kind: "join", Addr: 0x7010, Owner: tid, Desc: fmt.Sprintf("tid %d to exit (pthread_join)", tid)}
	return t
}

func (sc scene) findings() []model.Finding {
	exe := sc.exe
	if exe == "" {
		exe = "/usr/bin/app"
	}
	info := model.Info{PID: 100, Executable: exe, Command: []string{exe}, Trigger: model.Stall,
		Start: trigger.Add(-window), TriggerAt: trigger, End: trigger.Add(window),
		Host: &model.Host{CPUs: 2, Load1: 0.5, Running: 1}}
	if sc.info != nil {
		sc.info(&info)
	}
	var p *model.Profile
	if !sc.noProfile {
		p = &model.Profile{Samples: sc.samples, OnCPU: true, OffCPU: true, Mappings: []*model.Mapping{mApp, mLibc, mJIT, mAnon, mKernel}}
	}
	var snap *model.Snapshot
	if sc.threads != nil {
		snap = &model.Snapshot{PID: 100, Command: []string{exe}, Threads: sc.threads, Locks: model.BuildLockGraph(sc.threads)}
	}
	return Findings(&info, p, snap)
}

func TestFindings(t *testing.T) {
	tests := []struct {
		name  string
		scene scene
		// first is the kind of the first finding (with after, of a
		// finding after others); check what it says.
		first model.FindingKind
		after bool
		check func(t *testing.T, f model.Finding)
		// absent are kinds that must not be found.
		absent []model.FindingKind
	}{{
		name:  "stopped by a signal",
		scene: scene{threads: []model.Thread{thread(100, "app", 'T', spinStack...), thread(101, "w", 'T', lockStack...)}},
		first: model.FindingStopped,
		check: func(t *testing.T, f model.Finding) {
			if f.Severity != model.SeverityCritical || !strings.Contains(f.Detail, "kill -CONT 100") || len(f.TIDs) != 2 {
				t.Errorf("%+v", f)
			}
		},
	}, {
		name: "held by a debugger",
		scene: scene{threads: []model.Thread{func() model.Thread {
			th := thread(100, "app", 't', spinStack...)
			th.TracerPID, th.Tracer = 999, "gdb"
			return th
		}()}},
		first: model.FindingStopped,
		check: func(t *testing.T, f model.Finding) {
			if !strings.HasPrefix(f.Summary, "STOPPED BY A DEBUGGER") || !strings.Contains(f.Summary, `pid 999 "gdb"`) {
				t.Errorf("%+v", f)
			}
		},
	}, {
		name: "deadlock, before the thread that runs",
		scene: scene{
			samples: []model.Sample{on(103, 9*time.Second, spinStack)},
			threads: []model.Thread{waitsFor(thread(101, "a", 'S', lockStack[1:]...), 102), waitsFor(thread(102, "b", 'S', lockStack[1:]...), 101), thread(103, "spin", 'R', spinStack...)},
		},
		first: model.FindingDeadlock,
		check: func(t *testing.T, f model.Finding) {
			if !slices.Equal(f.TIDs, []int{101, 102}) || !strings.HasPrefix(f.Summary, `DEADLOCK: tid 101 "a" waits for tid 102 "b" waits for tid 101 "a".`) ||
				!slices.Contains(f.Functions, "lock_a") {
				t.Errorf("%+v", f)
			}
		},
	}, {
		name: "lock convoy",
		scene: scene{threads: []model.Thread{
			thread(100, "owner", 'S', stack(at(mApp, "slow_call_under_lock"), at(mApp, "main"))...),
			waitsFor(thread(101, "w1", 'S', lockStack[1:]...), 100), waitsFor(thread(102, "w2", 'S', lockStack[1:]...), 100), waitsFor(thread(103, "w3", 'S', lockStack[1:]...), 100),
		}},
		first: model.FindingLockConvoy,
		check: func(t *testing.T, f model.Finding) {
			if f.TIDs[0] != 100 || len(f.TIDs) != 4 || !slices.Contains(f.Functions, "slow_call_under_lock") {
				t.Errorf("%+v", f)
			}
		},
		absent: []model.FindingKind{model.FindingDeadlock},
	}, {
		// A JVM's launcher and its own threads joining the main thread:
		// they wait for it to exit, which holds no lock.
		name: "joins are no convoy",
		scene: scene{threads: []model.Thread{
			thread(100, "main", 'S', stack(at(mApp, "slow_call"), at(mApp, "main"))...),
			joins(thread(101, "j1", 'S', lockStack[1:]...), 100), joins(thread(102, "j2", 'S', lockStack[1:]...), 100), joins(thread(103, "j3", 'S', lockStack[1:]...), 100),
		}},
		absent: []model.FindingKind{model.FindingLockConvoy},
	}, {
		name: "uninterruptible in vfork",
		scene: scene{threads: []model.Thread{func() model.Thread {
			th := thread(100, "app", 'D')
			th.Kernel = vforkKernel
			th.OffCPUFor, th.OffCPUKnown = 15*time.Second, true
			return th
		}()}},
		first: model.FindingUninterruptible,
		check: func(t *testing.T, f model.Finding) {
			if f.Severity != model.SeverityCritical || !strings.Contains(f.Functions[0], "wait_for_vfork_done (vfork())") || !strings.Contains(f.Detail, "vfork") {
				t.Errorf("%+v", f)
			}
		},
	}, {
		name: "CPU starvation",
		scene: scene{samples: []model.Sample{
			on(101, 3*time.Second, spinStack), off(101, 6*time.Second, true, spinStack),
			on(102, 3*time.Second, spinStack), off(102, 6*time.Second, true, spinStack),
		}},
		first: model.FindingCPUStarvation,
		check: func(t *testing.T, f model.Finding) {
			if len(f.TIDs) != 2 || !strings.Contains(f.Detail, "The host: 2 CPUs") {
				t.Errorf("%+v", f)
			}
		},
		absent: []model.FindingKind{model.FindingSpinning},
	}, {
		name: "spinning while another waits in its own code",
		scene: scene{samples: []model.Sample{
			on(101, 9*time.Second, spinStack), off(102, 9*time.Second, false, lockStack),
		}},
		first: model.FindingSpinning,
		check: func(t *testing.T, f model.Finding) {
			if !slices.Equal(f.TIDs, []int{101, 102}) || !slices.Equal(f.Functions, []string{"spin"}) {
				t.Errorf("%+v", f)
			}
		},
	}, {
		// Go's idle threads park in the runtime; their stacks may end
		// with the mark of a walk cut short, which is not the program's
		// code: they do not wait for the spinner.
		name: "a hot Go thread, the runtime's threads idle",
		scene: scene{exe: "/srv/spin", samples: []model.Sample{
			on(101, 9*time.Second, stack(at(mApp, "main.spinHot"), at(mApp, "runtime.goexit"))),
			off(102, 9*time.Second, false, stack(at(mKernel, "futex_wait_queue"), at(mApp, "runtime.futex"), at(mApp, "runtime.mstart"),
				&model.Location{Kind: model.KindUnknown, Lines: []model.Line{{Function: "[truncated: no unwind info in spin]"}}})),
		}},
		first:  model.FindingHotThread,
		absent: []model.FindingKind{model.FindingSpinning},
	}, {
		name:  "a hot thread, nobody waiting",
		scene: scene{samples: []model.Sample{on(101, 2*time.Second, spinStack), on(102, 100*time.Millisecond, lockStack[2:])}},
		first: model.FindingHotThread,
		check: func(t *testing.T, f model.Finding) {
			if f.Severity != model.SeverityInfo || f.TIDs[0] != 101 {
				t.Errorf("%+v", f)
			}
		},
		absent: []model.FindingKind{model.FindingSpinning},
	}, {
		name:  "all waiting",
		scene: scene{samples: []model.Sample{off(101, 9*time.Second, false, idleStack), off(102, 9*time.Second, false, lockStack)}},
		first: model.FindingAllWaiting,
	}, {
		name: "Node.js event loop blocked in a JavaScript function",
		scene: scene{exe: "/usr/bin/node", samples: []model.Sample{
			on(100, 9*time.Second, stack(at(mJIT, "busyLoop"), at(mJIT, "handler"), at(mApp, "uv__io_poll"))),
		}, info: func(in *model.Info) { in.Counts.JITSources = 1 }},
		first: model.FindingEventLoopBlocked,
		check: func(t *testing.T, f model.Finding) {
			if f.Runtime != "node" || !slices.Equal(f.Functions, []string{"busyLoop"}) || !slices.Equal(f.TIDs, []int{100}) {
				t.Errorf("%+v", f)
			}
		},
		absent: []model.FindingKind{model.FindingMissingJITSymbols},
	}, {
		name: "Node.js without its JIT's names",
		scene: scene{exe: "/usr/bin/node", samples: []model.Sample{
			on(100, 9*time.Second, stack(at(mAnon, "[anon] 0x7f00001000"), at(mApp, "uv__io_poll"))),
		}},
		first: model.FindingEventLoopBlocked,
		check: func(t *testing.T, f model.Finding) {
			if !strings.Contains(f.Summary, "its JIT code has no names") {
				t.Errorf("%+v", f)
			}
		},
	}, {
		name: "GIL contention",
		scene: scene{exe: "/usr/bin/python3.12", samples: []model.Sample{
			on(101, 9*time.Second, stack(at(mApp, "_PyEval_EvalFrameDefault"))),
			off(102, 8*time.Second, false, stack(at(mKernel, "futex_wait_queue"), at(mApp, "take_gil"))),
			off(103, 8*time.Second, false, stack(at(mKernel, "futex_wait_queue"), at(mApp, "take_gil"))),
		}},
		first: model.FindingGIL,
		check: func(t *testing.T, f model.Finding) {
			if f.Runtime != "python" || !slices.Equal(f.TIDs, []int{101, 102, 103}) || !slices.Contains(f.Functions, "take_gil") {
				t.Errorf("%+v", f)
			}
		},
	}, {
		name: "Go stop-the-world held up by a loop",
		scene: scene{exe: "/srv/gostw", samples: []model.Sample{
			on(100, 9*time.Second, stack(at(mApp, "main.spin"), at(mApp, "runtime.goexit"))),
			off(101, 9*time.Second, false, stack(at(mApp, "runtime.stopTheWorldWithSema"), at(mApp, "runtime.gcStart"), at(mApp, "runtime.mstart"))),
		}},
		first: model.FindingRuntimePause,
		check: func(t *testing.T, f model.Finding) {
			if f.Runtime != "go" || !slices.Equal(f.TIDs, []int{100, 101}) || !strings.Contains(f.Summary, "main.spin") ||
				!slices.Contains(f.Functions, "runtime.stopTheWorldWithSema") {
				t.Errorf("%+v", f)
			}
		},
	}, {
		name: "missing JIT names",
		scene: scene{exe: "/usr/bin/java", samples: []model.Sample{
			on(101, 2*time.Second, stack(at(mAnon, "[anon] 0x7f00001000"), at(mApp, "JavaMain"))),
			off(101, 8*time.Second, false, idleStack),
		}},
		first: model.FindingMissingJITSymbols, after: true,
		check: func(t *testing.T, f model.Finding) {
			if f.Runtime != "jvm" || !strings.Contains(f.Detail, "Compiler.perfmap") {
				t.Errorf("%+v", f)
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := tt.scene.findings()
			i := slices.IndexFunc(fs, func(f model.Finding) bool { return f.Kind == tt.first })
			if tt.first == "" { // only what is absent matters
				i = -1
			} else if i < 0 || i > 0 && !tt.after {
				t.Fatalf("findings %s, want %s first", kinds(fs), tt.first)
			}
			if tt.check != nil && i >= 0 {
				tt.check(t, fs[i])
			}
			for _, f := range fs {
				if slices.Contains(tt.absent, f.Kind) {
					t.Errorf("a %s finding: %s", f.Kind, f.Summary)
				}
			}
		})
	}
}

func kinds(fs []model.Finding) string {
	var ks []string
	for _, f := range fs {
		ks = append(ks, string(f.Severity)+" "+string(f.Kind))
	}
	return "[" + strings.Join(ks, ", ") + "]"
}

// TestFindingsWithoutEvidence: no capture, no finding; a snapshot alone
// gives only what a snapshot shows.
func TestFindingsWithoutEvidence(t *testing.T) {
	if fs := Findings(nil, nil, nil); len(fs) != 0 {
		t.Errorf("nothing gives %s", kinds(fs))
	}
	fs := scene{noProfile: true, threads: []model.Thread{thread(100, "app", 'S', idleStack...)}}.findings()
	if len(fs) != 0 {
		t.Errorf("an idle snapshot gives %s", kinds(fs))
	}
}

// TestMissingJITWhenNamesMiss: JIT code no name covers is said however
// the names were sought — sampled with a JIT symbol source read (the
// source misses it: no switch to turn on), or only in the snapshot's
// stacks (a stall: nothing on the CPU) — and never without such code.
func TestMissingJITWhenNamesMiss(t *testing.T) {
	anon := stack(at(mAnon, "[anon] 0x7f00001000"), at(mApp, "JavaMain"))
	for _, c := range []struct {
		name  string
		scene scene
		want  []string // in the summary and detail
		not   string
		tids  []int
	}{
		{"sampled, a source read", scene{exe: "/usr/bin/java", samples: []model.Sample{on(101, 2*time.Second, anon)},
			info: func(in *model.Info) { in.Counts.JITSources = 1 }},
			[]string{"100.0% of the on-CPU time", "the 1 JIT symbol source read do not name it", "do not cover this code"}, "To name it", nil},
		{"the snapshot alone", scene{exe: "/usr/bin/java", noProfile: true, threads: []model.Thread{thread(101, "transfer-1", 'S', anon...)}},
			[]string{"1 thread's stack at the snapshot", "no JIT symbol file was found", "Compiler.perfmap"}, "", []int{101}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got *model.Finding
			for _, f := range c.scene.findings() {
				if f.Kind == model.FindingMissingJITSymbols {
					got = &f
				}
			}
			if got == nil {
				t.Fatal("no missing JIT names finding")
			}
			text := got.Summary + " " + got.Detail
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("%q lacks %q", text, w)
				}
			}
			if c.not != "" && strings.Contains(text, c.not) {
				t.Errorf("%q says %q", text, c.not)
			}
			if !slices.Equal(got.TIDs, c.tids) {
				t.Errorf("threads %v, want %v", got.TIDs, c.tids)
			}
		})
	}
	named := stack(at(mJIT, "Hot.fibonacci"), at(mApp, "JavaMain"))
	fs := scene{exe: "/usr/bin/java", samples: []model.Sample{on(101, 2*time.Second, named)},
		threads: []model.Thread{thread(101, "main", 'S', named...)}}.findings()
	for _, f := range fs {
		if f.Kind == model.FindingMissingJITSymbols {
			t.Errorf("named JIT code: %+v", f)
		}
	}
}

// TestJavaDeadlock: a cycle of Java threads each waiting for a monitor
// the next holds is a Java-level deadlock, named as jstack names it: the
// threads, the monitors, the methods each waits in and the methods that
// took the monitors.
func TestJavaDeadlock(t *testing.T) {
	mJava := &model.Mapping{File: model.JavaMapping, Kind: model.KindJIT}
	jframe := func(fn, file string, line int64) *model.Location {
		return &model.Location{Addr: 0x1000, Mapping: mJava, Kind: model.KindJIT, Lines: []model.Line{{Function: fn, File: file, Line: line}}}
	}
	park := at(&model.Mapping{File: "/usr/lib/jvm/java-17/lib/server/libjvm.so", Kind: model.KindNative}, "os::PlatformEvent::park")
	a := thread(101, "transfer-1", 'S', park, jframe("Ledger.settleSavingsFrom", "Stall.java", 44), jframe("Ledger.settleChecking", "Stall.java", 38))
	b := thread(102, "transfer-2", 'S', park, jframe("Ledger.settleCheckingFrom", "Stall.java", 58), jframe("Ledger.settleSavings", "Stall.java", 52))
	a.Wait = &model.Wait{Kind: "java monitor", Owner: 102, OwnerSite: "Ledger.settleSavings (Stall.java:52)",
		Desc: `Java monitor <0x000000069ec1c1e8> (a java.lang.Object), held by tid 102 "transfer-2" (locked in Ledger.settleSavings (Stall.java:52))`}
	b.Wait = &model.Wait{Kind: "java monitor", Owner: 101, OwnerSite: "Ledger.settleChecking (Stall.java:38)",
		Desc: `Java monitor <0x000000069ec1c1d8> (a java.lang.Object), held by tid 101 "transfer-1" (locked in Ledger.settleChecking (Stall.java:38))`}
	fs := scene{exe: "/usr/bin/java", noProfile: true, threads: []model.Thread{a, b}}.findings()
	if len(fs) == 0 || fs[0].Kind != model.FindingDeadlock {
		t.Fatalf("findings %s, want a deadlock first", kinds(fs))
	}
	f := fs[0]
	for _, w := range []string{"Java-level DEADLOCK", `"transfer-1"`, `"transfer-2"`, "<0x000000069ec1c1e8> (a java.lang.Object)",
		"waits in Ledger.settleSavingsFrom (Stall.java:44)", "locked in Ledger.settleChecking (Stall.java:38)"} {
		if !strings.Contains(f.Summary+" "+f.Detail, w) {
			t.Errorf("%q lacks %q", f.Summary+" "+f.Detail, w)
		}
	}
	want := []string{"Ledger.settleSavingsFrom", "Ledger.settleSavings", "Ledger.settleCheckingFrom", "Ledger.settleChecking"}
	if !slices.Equal(f.Functions, want) {
		t.Errorf("functions %q, want %q", f.Functions, want)
	}
}
