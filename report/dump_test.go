package report

import (
	"bytes"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/model"
)

func TestBuildThreads(t *testing.T) {
	snap := fixtureSnapshot()
	p, err := BuildThreads(snap)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.SampleType) != 1 || p.SampleType[0].Type != "threads" || p.SampleType[0].Unit != "count" {
		t.Fatalf("sample types %v, want threads/count", p.SampleType)
	}
	if len(p.Sample) != len(snap.Threads) {
		t.Fatalf("%d samples for %d threads", len(p.Sample), len(snap.Threads))
	}
	byTID := map[string]*profile.Sample{}
	for _, s := range p.Sample {
		if !reflect.DeepEqual(s.Value, []int64{1}) {
			t.Errorf("thread %s: value %v, want [1]", label(s, model.LabelThreadID), s.Value)
		}
		byTID[label(s, model.LabelThreadID)] = s
	}
	tests := []struct {
		tid      string
		name     string
		state    string
		blocked  int64 // -1: absent
		runq     int64
		leaf     string
		kernelTo int // frames that are kernel frames, on top
		frames   int
	}{
		{"11", "spinner", "R (running)", -1, int64(40 * time.Millisecond), "hash", 0, 4},
		{"12", "lock-a", "S (sleeping)", int64(12 * time.Second), int64(3 * time.Millisecond), "futex_wait_queue", 3, 8},
		{"15", "disk", "D (disk sleep)", int64(9 * time.Second), int64(3 * time.Millisecond), "io_schedule", 2, 6},
		{"18", "gone", "Z (zombie)", -1, 0, "[no stack: task exited while read]", 0, 1},
	}
	for _, tt := range tests {
		t.Run("tid "+tt.tid, func(t *testing.T) {
			s := byTID[tt.tid]
			if s == nil {
				t.Fatal("no sample")
			}
			if got := label(s, model.LabelThreadName); got != tt.name {
				t.Errorf("thread name %q, want %q", got, tt.name)
			}
			if got := label(s, model.LabelState); got != tt.state {
				t.Errorf("state %q, want %q", got, tt.state)
			}
			b, ok := numLabel(s, model.LabelBlocked)
			if (tt.blocked < 0) == ok || (ok && b != tt.blocked) {
				t.Errorf("blocked %d (present %v), want %d", b, ok, tt.blocked)
			}
			if ok && s.NumUnit[model.LabelBlocked][0] != "nanoseconds" {
				t.Errorf("blocked unit %v", s.NumUnit[model.LabelBlocked])
			}
			if r, _ := numLabel(s, model.LabelRunqueueWait); r != tt.runq || s.NumUnit[model.LabelRunqueueWait][0] != "nanoseconds" {
				t.Errorf("runqueue wait %d %v, want %d nanoseconds", r, s.NumUnit[model.LabelRunqueueWait], tt.runq)
			}
			if len(s.Location) != tt.frames {
				t.Fatalf("%d frames, want %d", len(s.Location), tt.frames)
			}
			if got := s.Location[0].Line[0].Function.Name; got != tt.leaf {
				t.Errorf("innermost %q, want %q", got, tt.leaf)
			}
			for i, l := range s.Location {
				isKernel := l.Mapping != nil && l.Mapping.File == model.KernelMapping
				if isKernel != (i < tt.kernelTo) {
					t.Errorf("frame %d (%s): kernel %v; kernel frames must come first", i, l.Line[0].Function.Name, isKernel)
				}
			}
		})
	}
	if o, _ := numLabel(byTID["14"], model.LabelOwner); o != 12 {
		t.Errorf("tid 14 owner label %d, want 12", o)
	}
	if w := label(byTID["12"], model.LabelWaitsFor); !strings.Contains(w, "held by tid 13") {
		t.Errorf("tid 12 waits-for label %q", w)
	}
	if !containsString(p.Comments, "deadlock: tid 12 → tid 13 → tid 12") {
		t.Errorf("comments lack the deadlock: %q", p.Comments)
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestThreadDumpOrderAndMerge(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteThreadDump(&buf, fixtureSnapshot()); err != nil {
		t.Fatal(err)
	}
	out := buf.String()

	// The lock graph comes before any stack, deadlock first.
	lockAt := strings.Index(out, "Lock graph")
	deadlockAt := strings.Index(out, `DEADLOCK 1: tid 12 "lock-a" → tid 13 "lock-b" → tid 12 "lock-a"`)
	chainAt := strings.Index(out, `chain: tid 14 "waiter" →[pthread mutex 0x7ffd0010] tid 12 "lock-a", which is in deadlock 1`)
	threadsAt := strings.Index(out, "Threads (8 in 7 distinct stacks")
	if lockAt < 0 || deadlockAt < lockAt || chainAt < deadlockAt || threadsAt < chainAt {
		t.Fatalf("lock graph, deadlock, chain and threads out of order (%d %d %d %d):\n%s", lockAt, deadlockAt, chainAt, threadsAt, out)
	}

	// Threads in dump order: deadlocked, waiting on them, D state,
	// sleeping (the merged pair), running, unreadable.
	rx := regexp.MustCompile(`(?m)^   tid (\d+) `)
	var order []int
	for _, m := range rx.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		order = append(order, n)
	}
	if want := []int{12, 13, 14, 15, 16, 17, 11, 18}; !reflect.DeepEqual(order, want) {
		t.Errorf("thread order %v, want %v\n%s", order, want, out)
	}

	// 16 and 17 share one stack: one header for two threads, the stack
	// printed once.
	if !strings.Contains(out, "── 2 threads\n   tid 16 ") || !regexp.MustCompile(`(?m)^   tid 17 .*\n    k hrtimer_nanosleep`).MatchString(out) {
		t.Errorf("idle-1 and idle-2 not merged:\n%s", out)
	}
	if n := strings.Count(out, "idle_loop (app.c:70)"); n != 2 { // the pair's stack and the waiter's
		t.Errorf("idle_loop printed %d times, want 2 (merged pair + tid 14)", n)
	}

	for _, want := range []string{
		`tid 12      "lock-a"         S (sleeping)  in futex(0x7ffd0040, FUTEX_WAIT_PRIVATE, 2)  off-CPU 12s (sampler)  runq wait 3ms  stopped 400µs`,
		"waits for pthread mutex 0x7ffd0040 held by tid 13",
		`tid 15      "disk"           D (disk sleep)  wchan io_schedule`,
		"hash (hash.h:30) (inlined)",
		"could not read: task exited while read",
		"longest stop 400µs",
		"Note: off-CPU times are from the sampler",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dump lacks %q:\n%s", want, out)
		}
	}
}

func TestThreadDumpNoLocks(t *testing.T) {
	snap := &model.Snapshot{PID: 1, Threads: []model.Thread{{TID: 1, Name: "main", State: 'R'}}}
	var buf bytes.Buffer
	if err := WriteThreadDump(&buf, snap); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "Lock graph: no thread waits for a lock another thread holds.") {
		t.Errorf("no-lock dump:\n%s", buf.String())
	}
}

func TestThreadDumpEscapesNames(t *testing.T) {
	snap := &model.Snapshot{PID: 1, Threads: []model.Thread{{
		TID: 1, Name: "evil\x1b[2J\nfake", State: 'S',
		User: []*model.Location{loc(mJIT, 0x7f2000000100, fn("jit\r\nname", "", 0))},
	}}}
	var buf bytes.Buffer
	if err := WriteThreadDump(&buf, snap); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.ContainsAny(out, "\x1b\r") || !strings.Contains(out, `"evil\x1b[2J\x0afake"`) || !strings.Contains(out, `jit\x0d\x0aname`) {
		t.Errorf("control characters from the target reach the terminal:\n%q", out)
	}
}

// FuzzRenderThreadDumpJSON: whatever thread dump reads (package model
// fuzzes the reading itself) renders and builds threads.pb.gz.
func FuzzRenderThreadDumpJSON(f *testing.F) {
	var buf bytes.Buffer
	if err := model.WriteSnapshotJSON(&buf, fixtureSnapshot()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`{"schema":1,"threads":[{"tid":1,"user":[{"addr":"0x1","mapping":0}]}],"mappings":[{"start":"0x0","limit":"0x10","offset":"0x0"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		snap, err := model.ReadSnapshotJSON(bytes.NewReader(data), "fuzz.json")
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteThreadDump(&out, snap); err != nil {
			t.Fatal(err)
		}
		if _, err := BuildThreads(snap); err != nil {
			t.Fatal(err)
		}
	})
}

func TestThreadsFromProfile(t *testing.T) {
	snap := fixtureSnapshot()
	p, err := BuildThreads(snap)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	q, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ThreadsFromProfile(q)
	if err != nil {
		t.Fatal(err)
	}
	if got.PID != 4242 || len(got.Threads) != len(snap.Threads) {
		t.Fatalf("pid %d, %d threads", got.PID, len(got.Threads))
	}
	if !reflect.DeepEqual(got.Locks.Cycles, [][]int{{12, 13}}) || !reflect.DeepEqual(got.Locks.Chains, [][]int{{14, 12}}) {
		t.Errorf("lock graph rebuilt as cycles %v chains %v, want [[12 13]] [[14 12]]", got.Locks.Cycles, got.Locks.Chains)
	}
	for i, want := range snap.Threads {
		g := got.Threads[i]
		if g.TID != want.TID || g.Name != want.Name || g.State != want.State || g.OffCPUKnown != want.OffCPUKnown ||
			g.OffCPUFor != want.OffCPUFor || g.RunqueueWait != want.RunqueueWait || len(g.Kernel) != len(want.Kernel) ||
			len(g.User) != len(want.User) || errText(g.Err) != errText(want.Err) {
			t.Errorf("thread %d rebuilt as %+v", want.TID, g)
		}
	}
	if _, err := ThreadsFromProfile(mustProfile(t)); err == nil || !strings.Contains(err.Error(), "not a thread snapshot profile") {
		t.Errorf("a CPU profile taken for a snapshot: %v", err)
	}
}

func mustProfile(t *testing.T) *profile.Profile {
	t.Helper()
	p, err := BuildProfile(fixtureSamples(), fixtureMeta())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWaitsFor(t *testing.T) {
	th := func(tid, owner int) model.Thread {
		t := model.Thread{TID: tid}
		if owner != 0 {
			t.Wait = &model.Wait{Owner: owner}
		}
		return t
	}
	tests := []struct {
		name    string
		threads []model.Thread
		cycles  [][]int
		chains  [][]int
	}{
		{"none", []model.Thread{th(1, 0), th(2, 0)}, nil, nil},
		{"chain to a running thread", []model.Thread{th(1, 2), th(2, 3), th(3, 0)}, nil, [][]int{{1, 2, 3}}},
		{"two-cycle with a waiter", []model.Thread{th(1, 2), th(2, 1), th(3, 1)}, [][]int{{1, 2}}, [][]int{{3, 1}}},
		{"self deadlock", []model.Thread{th(5, 5)}, [][]int{{5}}, nil},
		{"three-cycle", []model.Thread{th(1, 2), th(2, 3), th(3, 1)}, [][]int{{1, 2, 3}}, nil},
		{"cycle read from its smallest tid", []model.Thread{th(1, 9), th(9, 5), th(5, 9)}, [][]int{{5, 9}}, [][]int{{1, 9}}},
		{"longest chain first", []model.Thread{th(1, 9), th(2, 3), th(3, 4), th(4, 9), th(9, 0)}, nil, [][]int{{2, 3, 4, 9}, {1, 9}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := model.BuildLockGraph(tt.threads)
			if !reflect.DeepEqual(g.Cycles, tt.cycles) || !reflect.DeepEqual(g.Chains, tt.chains) {
				t.Errorf("cycles %v chains %v, want %v %v", g.Cycles, g.Chains, tt.cycles, tt.chains)
			}
		})
	}
}
