package sampler

import (
	"reflect"
	"testing"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// step is one input to an offTracker.
type step struct {
	op   string // "sample", "out", "out-preempt", "in", "end", "exit"
	time uint64
}

func runTracker(o *offTracker, steps []step) []Sample {
	var out []Sample
	for _, s := range steps {
		switch s.op {
		case "sample":
			o.switchOutSample(Sample{Time: s.time, TID: 7, Stack: []uint64{0xffffffff81000000, 0x401000}, Kernel: 1})
		case "out", "out-preempt":
			o.switchOut(s.time, s.op == "out-preempt", 1, 7, 0)
		case "in":
			if iv, ok := o.switchIn(s.time, 1, 7); ok {
				out = append(out, iv)
			}
		case "end":
			if iv, ok := o.end(s.time); ok {
				out = append(out, iv)
			}
		}
	}
	return out
}

type span struct {
	start, weight uint64
	preempted     bool
	stack         bool
}

func spans(ss []Sample) []span {
	var out []span
	for _, s := range ss {
		out = append(out, span{s.Time, s.Weight, s.Preempted, len(s.Stack) > 0})
	}
	return out
}

func TestOffTracker(t *testing.T) {
	blocked := &Sample{TID: 7, Stack: []uint64{0xffffffff81000000}, Kernel: 1}
	cases := []struct {
		name     string
		blocked  *Sample
		runnable bool
		steps    []step
		want     []span
		broken   uint64
	}{
		{
			name:  "switch out and in",
			steps: []step{{"sample", 100}, {"out", 101}, {"in", 300}, {"sample", 400}, {"out-preempt", 401}, {"in", 450}},
			want:  []span{{100, 200, false, true}, {400, 50, true, true}},
		},
		{
			name:    "blocked when observation began, never ran",
			blocked: blocked,
			steps:   []step{{"end", 5000}},
			want:    []span{{10, 4990, false, true}},
		},
		{
			name:    "blocked when observation began, then woke",
			blocked: blocked,
			steps:   []step{{"in", 70}, {"sample", 90}, {"out", 90}, {"in", 95}},
			want:    []span{{10, 60, false, true}, {90, 5, false, true}},
		},
		{
			name:    "seen blocked but it ran first: the /proc interval is dropped",
			blocked: blocked,
			steps:   []step{{"sample", 40}, {"out", 41}, {"in", 60}},
			want:    []span{{40, 20, false, true}},
		},
		{
			name:     "runnable when observation began: waited for a CPU until its switch-in",
			runnable: true,
			steps:    []step{{"in", 30}, {"sample", 50}, {"out", 50}, {"in", 55}},
			want:     []span{{10, 20, true, false}, {50, 5, false, true}},
		},
		{
			name:  "switch-out sample lost: interval without a stack",
			steps: []step{{"out-preempt", 20}, {"in", 25}},
			want:  []span{{20, 5, true, false}},
		},
		{
			name:   "switch-in lost: the interval is dropped and counted",
			steps:  []step{{"sample", 20}, {"out", 20}, {"sample", 40}, {"out", 40}, {"in", 45}},
			want:   []span{{40, 5, false, true}},
			broken: 1,
		},
		{
			name:  "a second switch-in is not an interval",
			steps: []step{{"sample", 20}, {"out", 20}, {"in", 25}, {"in", 30}},
			want:  []span{{20, 5, false, true}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var o offTracker
			o.begin(10, c.blocked, c.runnable)
			got := spans(runTracker(&o, c.steps))
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v\nwant %+v", got, c.want)
			}
			if o.broken != c.broken {
				t.Errorf("broken %d, want %d", o.broken, c.broken)
			}
		})
	}
}

// What /proc showed arrives after observation began; a switch record seen
// in between makes it stale.
func TestOffTrackerAdopt(t *testing.T) {
	blocked := &Sample{TID: 7, Stack: []uint64{0x401000}}
	var o offTracker
	o.watch(10)
	runTracker(&o, []step{{"sample", 20}, {"out", 20}})
	o.adopt(blocked, false, nil, nil)
	if iv, _ := o.current(30); iv.Time != 20 {
		t.Errorf("adopt after a switch replaced the interval: %+v", iv)
	}
	o.watch(100)
	o.adopt(blocked, false, nil, func([]procfs.KernelFrame) []uint64 { return []uint64{0xffffffff81000000} })
	o.kernel = []procfs.KernelFrame{{Symbol: "do_nanosleep"}}
	iv, ok := o.current(150)
	if !ok || iv.Time != 100 || iv.Weight != 50 || iv.Kernel != 1 || len(iv.Stack) != 2 {
		t.Errorf("adopted interval %+v %v, want since 100 with one kernel and one user frame", iv, ok)
	}
}

func TestOffTrackerCurrent(t *testing.T) {
	var o offTracker
	if _, ok := o.current(10); ok {
		t.Error("an unwatched thread has an open interval")
	}
	o.begin(0, nil, false)
	runTracker(&o, []step{{"sample", 100}, {"out", 100}})
	iv, ok := o.current(250)
	if !ok || iv.Time != 100 || iv.Weight != 150 {
		t.Errorf("current = %+v %v, want since 100 weight 150", iv, ok)
	}
	if iv, ok = o.current(250); !ok || iv.Weight != 150 {
		t.Error("current closed the interval")
	}
	runTracker(&o, []step{{"in", 300}})
	if _, ok := o.current(400); ok {
		t.Error("open after switch-in")
	}
}
