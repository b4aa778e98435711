package continuous

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capture"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// Range merges the periods that overlap a range, keeps the samples
// stamped inside it, and merges periods with and without off-CPU
// samples under the sample types of both; a note every period repeats
// is said once, and the JIT sources the periods name are kept; a range
// with no period says which periods there are.
func TestRange(t *testing.T) {
	dir := filepath.Join(t.TempDir(), DirName)
	s, err := openStore(dir, 0, 0, nil, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	loc := &model.Location{Addr: 0x1000, Lines: []model.Line{{Function: "work"}}}
	start := time.Now().Add(-time.Hour).Truncate(time.Minute)
	for i := range 4 {
		from := start.Add(time.Duration(i) * time.Minute)
		var samples []model.Sample
		for j := range 60 {
			samples = append(samples, model.Sample{Stack: []*model.Location{loc}, TID: 7, PID: 7,
				EndNanos: from.Add(time.Duration(j) * time.Second).UnixNano(), Nanos: 10e6})
		}
		if i == 2 {
			samples = append(samples, model.Sample{Stack: []*model.Location{loc}, TID: 8, PID: 7, OffCPU: true,
				EndNanos: from.Add(20 * time.Second).UnixNano(), Nanos: 5e8})
		}
		comments := []string{"command: node app.js", "note: period " + string(rune('0'+i)), "note: JIT symbols /tmp/jit-7.dump: 5 bad records"}
		if i > 0 {
			comments = append(comments, capture.JITSourceComment+"/tmp/jit-7.dump")
		}
		p, err := report.BuildProfile(samples, model.Meta{Start: from, Duration: time.Minute, Period: 10e6, Comments: comments})
		if err != nil {
			t.Fatal(err)
		}
		if i != 2 {
			onCPUOnlyForTest(p)
		}
		if _, err := s.write("7-node", from, p); err != nil {
			t.Fatal(err)
		}
	}
	// From the middle of the first period to the middle of the third.
	r, err := Range(context.Background(), dir, start.Add(30*time.Second), start.Add(150*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Files) != 3 || r.Command != "node app.js" || len(r.PIDs) != 1 || r.PIDs[0] != 7 {
		t.Errorf("files %v, command %q, pids %v", r.Files, r.Command, r.PIDs)
	}
	if len(r.Notes) != 4 || !strings.HasSuffix(r.Notes[1], ": JIT symbols /tmp/jit-7.dump: 5 bad records (and in 2 later periods)") ||
		!strings.HasPrefix(r.Notes[1], start.UTC().Format(time.RFC3339)) {
		t.Errorf("notes %q: want the three periods' own and the one they all give, once", r.Notes)
	}
	if !slices.Equal(r.JITSources, []string{"/tmp/jit-7.dump"}) {
		t.Errorf("JIT sources %q", r.JITSources)
	}
	var types []string
	for _, st := range r.Profile.SampleType {
		types = append(types, st.Type)
	}
	if len(types) != 4 || r.Profile.DefaultSampleType != model.TypeWallTime {
		t.Errorf("sample types %v (default %s), want the four of a capture", types, r.Profile.DefaultSampleType)
	}
	var on, off, wall int64
	for _, smp := range r.Profile.Sample {
		on += smp.Value[0]
		off += smp.Value[2]
		wall += smp.Value[3]
	}
	if on != 120 || off != 5e8 || wall != 120*10e6+5e8 {
		t.Errorf("%d on-CPU samples (want 120: 2 minutes of the range), %v off-CPU, %v wall", on, time.Duration(off), time.Duration(wall))
	}
	_, err = Range(context.Background(), dir, start.Add(-time.Hour), start.Add(-time.Minute))
	if want := "the 4 there begin from " + start.UTC().Format(time.RFC3339) + " to " + start.Add(3*time.Minute).UTC().Format(time.RFC3339); !errors.Is(err, errNoFiles) || !strings.Contains(fmt.Sprint(err), want) {
		t.Errorf("a range with no period: %v; want it to say %q", err, want)
	}
}

// onCPUOnlyForTest keeps cpu-samples and cpu-time, as a period without
// off-CPU sampling has them.
func onCPUOnlyForTest(p *profile.Profile) {
	p.SampleType = p.SampleType[:2]
	for _, s := range p.Sample {
		s.Value = s.Value[:2]
	}
	p.DefaultSampleType = model.TypeCPUTime
}
