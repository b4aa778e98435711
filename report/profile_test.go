package report

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

func TestBuildProfileSampleTypes(t *testing.T) {
	p, err := BuildProfile(fixtureSamples(), fixtureMeta())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range p.SampleType {
		got = append(got, st.Type+"/"+st.Unit)
	}
	want := []string{"cpu-samples/count", "cpu-time/nanoseconds", "off-cpu-time/nanoseconds", "wall-time/nanoseconds"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sample types %v, want %v", got, want)
	}
	if p.DefaultSampleType != "wall-time" {
		t.Errorf("default sample type %q, want wall-time", p.DefaultSampleType)
	}
	if p.PeriodType == nil || p.PeriodType.Type != "cpu-time" || p.PeriodType.Unit != "nanoseconds" || p.Period != fixturePeriod {
		t.Errorf("period %v %d, want cpu-time/nanoseconds %d", p.PeriodType, p.Period, fixturePeriod)
	}
	if p.TimeNanos != fixtureStart.UnixNano() || p.DurationNanos != int64(40*time.Second) {
		t.Errorf("time %d duration %d, want %d, %d", p.TimeNanos, p.DurationNanos, fixtureStart.UnixNano(), int64(40*time.Second))
	}
	if !reflect.DeepEqual(p.Comments, fixtureMeta().Comments) {
		t.Errorf("comments %q", p.Comments)
	}
}

// findSample returns the one sample with these labels and this innermost
// function, failing unless there is exactly one.
func findSample(t *testing.T, p *profile.Profile, leaf string, labels map[string]string) *profile.Sample {
	t.Helper()
	var found []*profile.Sample
next:
	for _, s := range p.Sample {
		if len(s.Location) == 0 || s.Location[0].Line[0].Function.Name != leaf {
			continue
		}
		for k, v := range labels {
			if label(s, k) != v {
				continue next
			}
		}
		found = append(found, s)
	}
	if len(found) != 1 {
		t.Fatalf("%d samples with leaf %s and labels %v, want 1", len(found), leaf, labels)
	}
	return found[0]
}

func TestBuildProfileValuesAndLabels(t *testing.T) {
	p, err := BuildProfile(fixtureSamples(), fixtureMeta())
	if err != nil {
		t.Fatal(err)
	}
	ms := int64(time.Millisecond)
	sec := int64(time.Second)
	tests := []struct {
		name   string
		leaf   string
		labels map[string]string
		values []int64 // cpu-samples, cpu-time, off-cpu-time, wall-time
		absent []string
	}{
		{"90 identical on-CPU samples merge", "hash", map[string]string{"thread id": "11", "thread name": "spinner", "phase": "during"}, []int64{90, 90 * ms, 0, 90 * ms}, []string{"off-cpu"}},
		{"phases stay apart", "hash", map[string]string{"thread id": "11", "phase": "before"}, []int64{10, 10 * ms, 0, 10 * ms}, nil},
		{"kernel-only sample", "hrtimer_interrupt", map[string]string{"thread id": "11"}, []int64{1, ms, 0, ms}, nil},
		{"off-CPU blocked", "futex_wait_queue", map[string]string{"thread id": "12", "off-cpu": "blocked"}, []int64{0, 0, 5 * sec, 5 * sec}, nil},
		{"off-CPU preempted apart from blocked", "schedule", map[string]string{"thread id": "14", "off-cpu": "preempted"}, []int64{0, 0, 2 * sec, 2 * sec}, nil},
		{"off-CPU blocked, same stack", "schedule", map[string]string{"thread id": "14", "off-cpu": "blocked"}, []int64{0, 0, sec, sec}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := findSample(t, p, tt.leaf, tt.labels)
			if !reflect.DeepEqual(s.Value, tt.values) {
				t.Errorf("values %v, want %v", s.Value, tt.values)
			}
			for _, k := range tt.absent {
				if _, ok := s.Label[k]; ok {
					t.Errorf("label %q present: %v", k, s.Label[k])
				}
			}
		})
	}
}

func TestBuildProfileWeights(t *testing.T) {
	stack := []*model.Location{aSpin}
	tests := []struct {
		name   string
		s      model.Sample
		period int64
		want   []int64
	}{
		{"count 0 is one sample of one period", model.Sample{Stack: stack, TID: 1}, 1000, []int64{1, 1000, 0, 1000}},
		{"count without nanos uses the period", model.Sample{Stack: stack, TID: 1, Count: 3}, 1000, []int64{3, 3000, 0, 3000}},
		{"nanos given win over the period", model.Sample{Stack: stack, TID: 1, Count: 2, Nanos: 1500}, 1000, []int64{2, 1500, 0, 1500}},
		{"off-CPU counts no samples", model.Sample{Stack: stack, TID: 1, OffCPU: true, Nanos: 7}, 1000, []int64{0, 0, 7, 7}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := BuildProfile([]model.Sample{tt.s}, model.Meta{Period: tt.period})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Sample) != 1 || !reflect.DeepEqual(p.Sample[0].Value, tt.want) {
				t.Fatalf("samples %v, want one with %v", p.Sample, tt.want)
			}
		})
	}
}

func TestBuildProfileRejectsBadSamples(t *testing.T) {
	tests := []struct {
		name    string
		s       model.Sample
		wantErr string
	}{
		{"nil frame", model.Sample{Stack: []*model.Location{aSpin, nil}, TID: 7}, "sample 0 (tid 7): frame 1 is nil"},
		{"negative nanos", model.Sample{Stack: []*model.Location{aSpin}, TID: 7, OffCPU: true, Nanos: -1}, "negative weight"},
		{"negative count", model.Sample{Stack: []*model.Location{aSpin}, TID: 7, Count: -2}, "negative weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildProfile([]model.Sample{tt.s}, model.Meta{Period: 1})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want it to say %q", err, tt.wantErr)
			}
		})
	}
}

func TestBuildProfileLocations(t *testing.T) {
	p, err := BuildProfile(fixtureSamples(), fixtureMeta())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	byFunc := map[string]*profile.Location{}
	for _, l := range p.Location {
		byFunc[l.Line[0].Function.Name] = l
	}
	t.Run("inline frames are lines of one location, innermost first", func(t *testing.T) {
		l := byFunc["hash"]
		if l == nil || len(l.Line) != 2 || l.Line[1].Function.Name != "spin" {
			t.Fatalf("hash location %+v, want lines hash, spin", l)
		}
		if l.Line[0].Function.Filename != "/src/app/hash.h" || l.Line[0].Line != 30 || l.Line[1].Function.Filename != "/src/app/app.c" || l.Line[1].Line != 12 {
			t.Errorf("file/line lost: %+v %+v", l.Line[0], l.Line[1])
		}
		if !l.Mapping.HasInlineFrames {
			t.Error("exe mapping not marked HasInlineFrames")
		}
	})
	t.Run("one location per distinct frame", func(t *testing.T) {
		if len(p.Location) != 19 {
			t.Errorf("%d locations, want the fixture's 19 distinct frames", len(p.Location))
		}
		seen := map[*profile.Function]bool{}
		for _, f := range p.Function {
			if seen[f] {
				t.Errorf("function %s twice", f.Name)
			}
			seen[f] = true
		}
	})
	t.Run("mappings keep build ids and flags", func(t *testing.T) {
		want := map[string]string{"/usr/bin/app": "aa11bb22", "/usr/lib/x86_64-linux-gnu/libc.so.6": "cc33dd44", model.KernelMapping: "", "/tmp/jit-4242.dump": ""}
		got := map[string]string{}
		for _, m := range p.Mapping {
			got[m.File] = m.BuildID
			if !m.HasFunctions {
				t.Errorf("mapping %s: HasFunctions false: pprof would re-symbolize it on the reader's machine", m.File)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("mappings %v, want %v", got, want)
		}
		if p.Mapping[0].File != "/usr/bin/app" {
			t.Errorf("first mapping %s, want the executable", p.Mapping[0].File)
		}
	})
	t.Run("kernel frames are in the kernel mapping", func(t *testing.T) {
		for _, name := range []string{"futex_wait_queue", "hrtimer_interrupt"} {
			l := byFunc[name]
			if l == nil || l.Mapping == nil || l.Mapping.File != model.KernelMapping {
				t.Errorf("%s: mapping %+v, want %s", name, l.Mapping, model.KernelMapping)
			}
		}
	})
}

func TestBuildProfileLocationIdentity(t *testing.T) {
	// The same frame as two values merges; one address holding two JIT
	// functions over time does not.
	a := loc(mJIT, 0x7f2000000100, fn("first", "", 0))
	aCopy := loc(mJIT, 0x7f2000000100, fn("first", "", 0))
	b := loc(mJIT, 0x7f2000000100, fn("second", "", 0))
	p, err := BuildProfile([]model.Sample{
		{Stack: []*model.Location{a}, TID: 1},
		{Stack: []*model.Location{aCopy}, TID: 1},
		{Stack: []*model.Location{b}, TID: 1},
	}, model.Meta{Period: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Location) != 2 || len(p.Sample) != 2 {
		t.Fatalf("%d locations, %d samples; want 2 and 2", len(p.Location), len(p.Sample))
	}
	if p.Location[0].Address != p.Location[1].Address {
		t.Error("the two JIT functions should share their address")
	}
}

func TestBuildProfileRoundTrip(t *testing.T) {
	p, err := BuildProfile(fixtureSamples(), fixtureMeta())
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
	if err := q.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if q.Mapping[0].File != "/usr/bin/app" {
		t.Errorf("after parsing, main mapping %s", q.Mapping[0].File)
	}
	var f1, f2 bytes.Buffer
	if err := WriteFolded(&f1, p, ExportOptions{SampleType: model.TypeWallTime}); err != nil {
		t.Fatal(err)
	}
	if err := WriteFolded(&f2, q, ExportOptions{SampleType: model.TypeWallTime}); err != nil {
		t.Fatal(err)
	}
	if f1.String() != f2.String() {
		t.Errorf("the profile changed on the way through the file:\n%s\nvs\n%s", f1.String(), f2.String())
	}
}

func TestBuildProfileEmpty(t *testing.T) {
	p, err := BuildProfile(nil, model.Meta{Period: 1e6, Comments: []string{"cut short: SIGTERM"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 0 || len(p.SampleType) != 4 {
		t.Fatalf("empty profile: %d samples, %d types", len(p.Sample), len(p.SampleType))
	}
	var buf bytes.Buffer
	if err := p.Write(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := profile.Parse(&buf); err != nil {
		t.Fatal(err)
	}
}

// TestGoToolPprof runs `go tool pprof` on the written files, as a user
// would: both profiles open unchanged, -top ranks by wall time, -traces
// shows the labels.
func TestGoToolPprof(t *testing.T) {
	testutil.EndToEnd(t) // go tool pprof reads what we wrote
	goBin := testutil.RequireTool(t, "go")
	// Made as a capture makes it: profile.pb.gz from the table's encoder.
	dir := writeCapture(t, t.TempDir(), builtFixtureCapture(t))
	pprof := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, append([]string{"tool", "pprof"}, args...)...)
		cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir(), "PPROF_BINARY_PATH=/nonexistent")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go tool pprof %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	prof := filepath.Join(dir, capdir.FileProfile)
	top := pprof("-top", prof)
	for _, want := range []string{"Type: wall-time", "futex_wait_queue", "hash (inline)", "stallwatch capture: trigger stall"} {
		if !strings.Contains(top, want) {
			t.Errorf("-top lacks %q:\n%s", want, top)
		}
	}
	if strings.Contains(top, "Local symbolization failed") || strings.Contains(top, "Main binary filename not available") {
		t.Errorf("pprof tried to symbolize again:\n%s", top)
	}
	if f := topLine(top, "futex_wait_queue"); len(f) < 1 || f[0] != "10s" {
		t.Errorf("-top: futex_wait_queue should hold 10s of wall time (two threads blocked 5s each): %q", f)
	}
	cpu := pprof("-top", "-sample_index=cpu-time", prof)
	if !strings.Contains(cpu, "Type: cpu-time") || !strings.Contains(cpu, "100ms") {
		t.Errorf("-top -sample_index=cpu-time:\n%s", cpu)
	}
	traces := pprof("-traces", prof)
	for _, want := range []string{"thread id:  12", "thread name:  lock-a", "phase:  during", "off-cpu:  preempted", "lock_b"} {
		if !strings.Contains(traces, want) {
			t.Errorf("-traces lacks %q:\n%s", want, traces)
		}
	}
	focus := pprof("-top", "-tagfocus=thread id=^13$", prof)
	if !strings.Contains(focus, "lock_b") || strings.Contains(focus, "lock_a") {
		t.Errorf("-tagfocus on thread id 13 should keep lock_b only:\n%s", focus)
	}
	threads := pprof("-traces", filepath.Join(dir, capdir.FileThreads))
	for _, want := range []string{"Type: threads", "state:  D (disk sleep)", "blocked:  9s", "runqueue wait:  40ms", "waits for:  pthread mutex 0x7ffd0040 held by tid 13"} {
		if !strings.Contains(threads, want) {
			t.Errorf("threads -traces lacks %q:\n%s", want, threads)
		}
	}
}

// topLine returns the fields of the -top line of function name.
func topLine(top, name string) []string {
	for _, line := range strings.Split(top, "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[5] == name {
			return f
		}
	}
	return nil
}

// TestBuildProfileMergesByEndTime: samples merge when stack, labels and
// end time are the same, whatever else came between them, and never
// across end times close together (the same microsecond) or far apart,
// nor across threads.
func TestBuildProfileMergesByEndTime(t *testing.T) {
	a := []*model.Location{{Addr: 0x1000, Lines: []model.Line{{Function: "a"}}}}
	b := []*model.Location{{Addr: 0x2000, Lines: []model.Line{{Function: "b"}}}}
	const t0 = int64(1_700_000_000_000_000_000)
	on := func(stack []*model.Location, tid int, end int64) model.Sample {
		return model.Sample{Stack: stack, TID: tid, Count: 1, EndNanos: end}
	}
	tests := []struct {
		name    string
		samples []model.Sample
		want    []int64 // cpu-samples of each pprof sample, in order
	}{
		{"same end, stack and thread", []model.Sample{on(a, 1, t0), on(b, 1, t0+5000), on(a, 1, t0)}, []int64{2, 1}},
		{"same microsecond, other end", []model.Sample{on(a, 1, t0), on(a, 1, t0+1), on(a, 1, t0+1), on(a, 1, t0)}, []int64{2, 2}},
		{"same end, other thread", []model.Sample{on(a, 1, t0), on(a, 2, t0), on(a, 1, t0)}, []int64{2, 1}},
		{"same end, other stack", []model.Sample{on(a, 1, t0), on(b, 1, t0), on(b, 1, t0)}, []int64{1, 2}},
		{"a table's size apart", []model.Sample{on(a, 1, t0), on(a, 1, t0+16<<10), on(a, 1, t0+32<<10), on(a, 1, t0+16<<10)}, []int64{1, 2, 1}},
		{"untimed", []model.Sample{on(a, 1, 0), on(b, 1, 0), on(a, 1, 0), on(a, 2, 0)}, []int64{2, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := BuildProfile(tt.samples, model.Meta{Period: 1e6})
			if err != nil {
				t.Fatal(err)
			}
			var got []int64
			for _, s := range p.Sample {
				got = append(got, s.Value[valCPUSamples])
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("pprof samples of %v samples, want %v", got, tt.want)
			}
		})
	}
}
