package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
	"github.com/stallwatch/stallwatch/sampler"
)

// phasesTarget starts testdata/python/phases.py (alpha, beta, gamma for
// phase each, rounds times) and returns it with its standard input, to
// be told to begin, and the path of the timeline it writes.
func phasesTarget(t *testing.T, python string, phase time.Duration, rounds int, args ...string) (*testutil.Target, io.WriteCloser, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "timeline.json")
	args = append(args, testutil.Testdata(t, "python", "phases.py"), strconv.Itoa(int(phase.Milliseconds())), strconv.Itoa(rounds), out)
	cmd := exec.Command(python, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 30*time.Second)
	return tg, stdin, out
}

// timeline is when each phase began, CLOCK_MONOTONIC.
type timeline []struct {
	at   uint64
	name string
}

func readTimeline(t *testing.T, path string) timeline {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw [][]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	var tl timeline
	for _, e := range raw {
		tl = append(tl, struct {
			at   uint64
			name string
		}{uint64(e[0].(float64)), e[1].(string)})
	}
	return tl
}

// at is the function running at monotonic time m ("" outside the phases).
func (tl timeline) at(m uint64) string {
	name := ""
	for _, e := range tl {
		if e.at > m {
			break
		}
		name = e.name
	}
	if name == "end" {
		return ""
	}
	return name
}

// leafPython is the phase function a sample ran in (its innermost
// Python function, or the caller of phases.py's now(), which the phase
// functions call), and whether its stack ran in the interpreter at all (a
// Python frame, or an evaluation frame left unattributed).
func leafPython(s *profile.Sample) (string, bool) {
	inInterp := false
	for _, l := range s.Location {
		if l.Mapping != nil && l.Mapping.File == model.PythonMapping && len(l.Line) > 0 {
			if fn := l.Line[0].Function.Name; fn != "now" {
				return fn, true
			}
			inInterp = true
			continue
		}
		for _, ln := range l.Line {
			if strings.HasPrefix(ln.Function.Name, "_PyEval_EvalFrameDefault") {
				inInterp = true
			}
		}
	}
	return "", inInterp
}

// TestPythonAttribution records a CPython of each version running pure
// Python in known functions for known phases at 997 Hz: of the on-CPU
// samples taken in the interpreter, at least 90% must carry the function
// that ran at that moment (the target's own timeline) as their
// innermost Python frame, and capture.json must say how long after each
// sample its frames were read.
func TestPythonAttribution(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	for _, py := range testutil.Pythons {
		t.Run(py.Name, func(t *testing.T) {
			t.Parallel() // a target of its own, seconds of its clock
			python := testutil.RequireTool(t, py.Path)
			// Phases long beside the read delay of a loaded machine: the
			// frames are read when the sampler's reader gets a CPU, which
			// a 2-core host at load 15-30 gives it tens of ms late (p99
			// above 100 ms seen); a sample read after its phase ended is
			// attributed to the next one. Three rounds: at load 57 one
			// round gave the spinner 44-119 samples of its 3 s, beside the
			// 100 the test needs.
			tg, stdin, tlPath := phasesTarget(t, python, time.Second, 3)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			started := make(chan struct{})
			var once bool
			go func() {
				<-started
				stdin.Write([]byte("go\n"))
				tg.WaitLine(t, "done", 60*time.Second)
				cancel()
			}()
			offset := time.Now().UnixNano() - int64(monotime.Now())
			_, p, info := recordCtx(t, ctx, tg.Pid, time.Minute, nil, func(Progress) {
				if !once {
					once = true
					close(started)
				}
			})
			tl := readTimeline(t, tlPath)
			cpu := valueIndex(t, p, model.TypeCPUSamples)
			var in, right int
			wrong := map[string]int{}
			for _, s := range p.Sample {
				end := s.NumLabel[model.LabelEndTime]
				if s.Value[cpu] == 0 || len(end) == 0 {
					continue
				}
				want := tl.at(uint64(end[0] - offset))
				fn, interp := leafPython(s)
				if want == "" || !interp {
					continue
				}
				in++
				if fn == want {
					right++
				} else {
					wrong[want+"→"+fn]++
				}
			}
			if in < 100 {
				t.Fatalf("only %d on-CPU samples in the interpreter during the phases", in)
			}
			share := float64(right) / float64(in)
			t.Logf("%d of %d samples in the interpreter attributed right (%.1f%%); wrong: %v", right, in, 100*share, wrong)
			if share < 0.9 {
				t.Errorf("%.1f%% of samples in the interpreter attributed to the function running then, want ≥ 90%%", 100*share)
			}
			var noted bool
			for _, n := range info.Notes {
				noted = noted || strings.Contains(n, "got their Python frames")
				if strings.Contains(n, "Python") {
					t.Logf("note: %s", n)
				}
			}
			if !noted {
				t.Errorf("capture.json does not say how the Python frames were read: %q", info.Notes)
			}
		})
	}
}

// TestPythonPerfTrampolinesAgree: CPython 3.12 under -X perf names its
// Python functions twice in a sample, by the perf trampolines on the
// native stack (from its perf map) and by the frames read from its
// memory: the two must be the same functions, in the same order, in at
// least 90% of the samples that have both (the rest were read after the
// thread called or returned).
func TestPythonPerfTrampolinesAgree(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	python := testutil.RequireTool(t, "/root/.pyenv/versions/3.12.1/bin/python3")
	tg, stdin, _ := phasesTarget(t, python, 500*time.Millisecond, 3, "-X", "perf") // long phases: see TestPythonAttribution
	t.Cleanup(func() { os.Remove(filepath.Join("/tmp", "perf-"+strconv.Itoa(tg.Pid)+".map")) })
	cfg := Config{PID: tg.Pid, Out: t.TempDir()}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	s, err := newSession(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.tp.Close()
	if s.annot == nil {
		t.Fatalf("no Python annotator for a CPython target: %q", s.notes)
	}
	smp, err := sampler.Start(s.samplerConfig(997, false, -1))
	if err != nil {
		t.Fatal(err)
	}
	defer smp.Close()
	rec := smp.StartRecording()
	stdin.Write([]byte("go\n"))
	tg.WaitLine(t, "done", 60*time.Second)
	samples := rec.Stop()
	if err := s.tp.Refresh(); err != nil {
		t.Logf("refresh: %v", err)
	}
	var both, same int
	var example string
	for i := range samples {
		smp := &samples[i]
		// The frames read, alone: spliced into no native stack, they
		// follow it in their order, innermost first.
		py, _ := s.annot.Splice(nil, smp.Interp)
		if len(py) == 0 {
			continue
		}
		native := s.tp.Symbols().LocateSample(nil, smp.Stack, int(smp.Kernel), smp.Time, smp.Cut)
		var tramp, read []string
		for _, l := range native {
			if l.Kind == model.KindJIT && len(l.Lines) > 0 && strings.HasPrefix(l.Lines[0].SystemName, "py::") {
				tramp = append(tramp, l.Lines[0].Function)
			}
		}
		for _, l := range py {
			read = append(read, l.Lines[0].Function)
		}
		if len(tramp) == 0 {
			continue
		}
		both++
		if slices.Equal(tramp, read) {
			same++
		} else if example == "" {
			example = fmt.Sprintf("trampolines %v, frames read %v", tramp, read)
		}
	}
	if both < 100 {
		t.Fatalf("only %d samples with both trampolines and Python frames", both)
	}
	t.Logf("%d of %d samples name the same functions both ways; first difference: %s", same, both, example)
	if float64(same) < 0.9*float64(both) {
		t.Errorf("the perf trampolines and the frames read agree in %d of %d samples, want ≥ 90%%", same, both)
	}
}

// TestPythonFlightRecorder: the flight recorder's samples of a CPython
// target (the baseline rate, before the trigger) carry their Python
// frames too, resolved when the capture is written.
func TestPythonFlightRecorder(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	python := testutil.RequireTool(t, "/usr/bin/python3")
	tg := testutil.Start(t, python, testutil.Testdata(t, "python", "pywork.py"))
	tg.WaitLine(t, "ready", 30*time.Second)
	s, err := Open(Config{PID: tg.Pid, Out: t.TempDir(), Freq: 499, BaselineFreq: 97, CaptureFor: time.Second, History: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := testutil.Eventually(60*time.Second, func() bool { return s.smp.Stats().Samples >= 50 }); err != nil {
		t.Fatalf("the flight recorder took %d samples", s.smp.Stats().Samples)
	}
	res, err := s.Capture(context.Background(), model.Trigger{Kind: model.Manual, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := report.ReadProfile(context.Background(), filepath.Join(res.Dir, capdir.FileProfile))
	if err != nil {
		t.Fatal(err)
	}
	var before, named int
	for _, smp := range p.Sample {
		if ph := smp.Label[model.LabelPhase]; len(ph) == 0 || ph[0] != model.PhaseBefore {
			continue
		}
		fn, interp := leafPython(smp)
		if !interp {
			continue
		}
		before++
		if fn == "leaf" || fn == "level" {
			named++
		}
	}
	if before < 20 || float64(named) < 0.9*float64(before) {
		t.Errorf("%d of the flight recorder's %d samples in the interpreter name pywork.py's functions", named, before)
	}
}
