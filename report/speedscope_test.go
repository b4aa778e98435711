package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/model"
)

// checkSpeedscope validates a file against the rules of speedscope's file
// format, as its published schema (file-format-schema.json, generated from
// src/lib/file-format-spec.ts) states them: the required fields and their
// JSON types, the "$schema" constant, the unit and profile type
// enumerations, frame indexes within the shared frames, as many weights as
// samples, startValue <= endValue, and for evented profiles ordered and
// balanced open and close events. The schema itself is not copied here;
// these checks are written from the format's documentation.
func checkSpeedscope(data []byte) error {
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if f["$schema"] != "https://www.speedscope.app/file-format-schema.json" {
		return fmt.Errorf("$schema is %v", f["$schema"])
	}
	if _, ok := f["version"].(string); !ok {
		return fmt.Errorf("version %v is not a string", f["version"])
	}
	if n, ok := f["name"]; ok {
		if _, ok := n.(string); !ok {
			return fmt.Errorf("name %v is not a string", n)
		}
	}
	shared, ok := f["shared"].(map[string]any)
	if !ok {
		return fmt.Errorf("shared is missing or not an object")
	}
	frames, ok := shared["frames"].([]any)
	if !ok {
		return fmt.Errorf("shared.frames is missing or not an array")
	}
	for i, fr := range frames {
		m, ok := fr.(map[string]any)
		if !ok {
			return fmt.Errorf("frame %d is not an object", i)
		}
		if _, ok := m["name"].(string); !ok {
			return fmt.Errorf("frame %d has no string name", i)
		}
		if v, ok := m["file"]; ok {
			if _, ok := v.(string); !ok {
				return fmt.Errorf("frame %d: file is not a string", i)
			}
		}
		for _, k := range []string{"line", "col"} {
			if v, ok := m[k]; ok {
				if _, ok := v.(float64); !ok {
					return fmt.Errorf("frame %d: %s is not a number", i, k)
				}
			}
		}
	}
	profiles, ok := f["profiles"].([]any)
	if !ok {
		return fmt.Errorf("profiles is missing or not an array")
	}
	if v, ok := f["activeProfileIndex"]; ok {
		x, ok := v.(float64)
		if !ok || x != math.Trunc(x) || x < 0 || int(x) >= max(len(profiles), 1) {
			return fmt.Errorf("activeProfileIndex %v is not an index of the %d profiles", v, len(profiles))
		}
	}
	units := map[string]bool{"none": true, "nanoseconds": true, "microseconds": true, "milliseconds": true, "seconds": true, "bytes": true}
	frameIndex := func(v any) (int, bool) {
		x, ok := v.(float64)
		if !ok || x != math.Trunc(x) || x < 0 || int(x) >= len(frames) {
			return 0, false
		}
		return int(x), true
	}
	for i, pv := range profiles {
		p, ok := pv.(map[string]any)
		if !ok {
			return fmt.Errorf("profile %d is not an object", i)
		}
		if _, ok := p["name"].(string); !ok {
			return fmt.Errorf("profile %d has no string name", i)
		}
		if u, _ := p["unit"].(string); !units[u] {
			return fmt.Errorf("profile %d: unit %v is not one of speedscope's", i, p["unit"])
		}
		start, ok1 := p["startValue"].(float64)
		end, ok2 := p["endValue"].(float64)
		if !ok1 || !ok2 || end < start {
			return fmt.Errorf("profile %d: startValue %v, endValue %v", i, p["startValue"], p["endValue"])
		}
		switch p["type"] {
		case "sampled":
			samples, ok := p["samples"].([]any)
			if !ok {
				return fmt.Errorf("profile %d: samples is not an array", i)
			}
			weights, ok := p["weights"].([]any)
			if !ok || len(weights) != len(samples) {
				return fmt.Errorf("profile %d: %d weights for %d samples", i, len(weights), len(samples))
			}
			for j, sv := range samples {
				st, ok := sv.([]any)
				if !ok {
					return fmt.Errorf("profile %d sample %d is not an array", i, j)
				}
				for _, fv := range st {
					if _, ok := frameIndex(fv); !ok {
						return fmt.Errorf("profile %d sample %d: %v is not a frame index", i, j, fv)
					}
				}
				if w, ok := weights[j].(float64); !ok || w < 0 {
					return fmt.Errorf("profile %d weight %d is %v", i, j, weights[j])
				}
			}
		case "evented":
			events, ok := p["events"].([]any)
			if !ok {
				return fmt.Errorf("profile %d: events is not an array", i)
			}
			var open []int
			last := math.Inf(-1)
			for j, ev := range events {
				e, ok := ev.(map[string]any)
				if !ok {
					return fmt.Errorf("profile %d event %d is not an object", i, j)
				}
				at, ok := e["at"].(float64)
				if !ok || at < last {
					return fmt.Errorf("profile %d event %d: at %v out of order", i, j, e["at"])
				}
				last = at
				fi, ok := frameIndex(e["frame"])
				if !ok {
					return fmt.Errorf("profile %d event %d: frame %v", i, j, e["frame"])
				}
				switch e["type"] {
				case "O":
					open = append(open, fi)
				case "C":
					if len(open) == 0 || open[len(open)-1] != fi {
						return fmt.Errorf("profile %d event %d closes frame %d, not the one open", i, j, fi)
					}
					open = open[:len(open)-1]
				default:
					return fmt.Errorf("profile %d event %d: type %v", i, j, e["type"])
				}
			}
			if len(open) > 0 {
				return fmt.Errorf("profile %d: %d frames left open", i, len(open))
			}
		default:
			return fmt.Errorf("profile %d: type %v", i, p["type"])
		}
	}
	return nil
}

func TestCheckSpeedscopeRejects(t *testing.T) {
	good := `{"$schema":"https://www.speedscope.app/file-format-schema.json","version":"0.6.0","shared":{"frames":[{"name":"a"}]},` +
		`"profiles":[{"type":"sampled","name":"p","unit":"nanoseconds","startValue":0,"endValue":5,"samples":[[0]],"weights":[5]}]}`
	if err := checkSpeedscope([]byte(good)); err != nil {
		t.Fatalf("a valid file: %v", err)
	}
	for _, bad := range []string{
		strings.Replace(good, `"$schema":"https://www.speedscope.app/file-format-schema.json",`, "", 1),
		strings.Replace(good, `"nanoseconds"`, `"ns"`, 1),
		strings.Replace(good, `"samples":[[0]]`, `"samples":[[1]]`, 1),
		strings.Replace(good, `"weights":[5]`, `"weights":[5,1]`, 1),
		strings.Replace(good, `"endValue":5`, `"endValue":-1`, 1),
		strings.Replace(good, `"type":"sampled"`, `"type":"other"`, 1),
	} {
		if err := checkSpeedscope([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// TestWriteSpeedscope: one profile per thread, valid by the format's
// rules, stacks from the root, weights that add up to the profile's, and
// a phase filter.
func TestWriteSpeedscope(t *testing.T) {
	c := fixtureCapture(t)
	var buf bytes.Buffer
	if err := WriteSpeedscope(&buf, c.Profile, "pid 4242", ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := checkSpeedscope(buf.Bytes()); err != nil {
		t.Fatalf("invalid speedscope file: %v\n%s", err, buf.String())
	}
	var f speedscopeFile
	if err := json.Unmarshal(buf.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, p := range f.Profiles {
		var sum int64
		for _, w := range p.Weights {
			sum += w
		}
		got[p.Name] = sum
	}
	want := map[string]int64{
		`tid 11 "spinner" (wall-time)`: 101e6,
		`tid 12 "lock-a" (wall-time)`:  5e9 + 300e6,
		`tid 13 "lock-b" (wall-time)`:  5e9,
		`tid 14 "metrics" (wall-time)`: 3e9,
		`tid 15 "disk" (wall-time)`:    5e9,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("profile %q weighs %d, want %d (profiles: %v)", k, got[k], v, got)
		}
	}
	if len(f.Profiles) != len(want) {
		t.Errorf("%d profiles, want %d: %v", len(f.Profiles), len(want), got)
	}
	if p := f.Profiles[f.ActiveProfileIndex]; !strings.HasPrefix(p.Name, "tid 12 ") {
		t.Errorf("opens with %q, want the busiest thread (tid 12)", p.Name)
	}
	for _, p := range f.Profiles {
		for _, st := range p.Samples {
			if root := f.Shared.Frames[st[0]].Name; root != "__clone3" && root != "hrtimer_interrupt_[k]" {
				t.Errorf("%s: a stack starts at %q, not at the thread's root", p.Name, root)
			}
		}
	}
	buf.Reset()
	if err := WriteSpeedscope(&buf, c.Profile, "x", ExportOptions{Phase: model.PhaseBefore, SampleType: model.TypeOffCPUTime}); err != nil {
		t.Fatal(err)
	}
	if err := checkSpeedscope(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `tid 12 \"lock-a\" (off-cpu-time, before the trigger (flight recorder))`) || strings.Contains(buf.String(), "spinner") {
		t.Errorf("before, off-CPU: %s", buf.String())
	}
}
