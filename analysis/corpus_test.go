package analysis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/stallwatch/stallwatch/analysis"
	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// The corpus: captures of real targets (testdata/captures/NAME, each made
// by scenario NAME with -record-corpus; madeBy says how), on which the
// findings are checked with no root and no live process.

var update = flag.Bool("update", false, "write the findings drawn from each stored capture into its capture.json")

// madeBy is the file beside each stored capture that says how it was made.
const madeBy = "MADE-BY"

func corpusDir(t *testing.T) string { return testutil.Testdata(t, "captures") }

// corpus lists the stored captures.
func corpus(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(corpusDir(t))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatal("no stored captures in testdata/captures: make corpus")
	}
	return names
}

// TestCorpus: every stored capture parses (capture.json, profile.pb.gz,
// threads.json, threads.pb.gz), says how it was made, gives again the
// findings its capture.json holds, and meets what its scenario expects.
func TestCorpus(t *testing.T) {
	byName := map[string]scenario{}
	for _, sc := range scenarios {
		byName[sc.name] = sc
	}
	for _, name := range corpus(t) {
		t.Run(name, func(t *testing.T) {
			sc, ok := byName[name]
			if !ok {
				t.Fatalf("no scenario %q: a stored capture nobody makes again or checks", name)
			}
			dir := filepath.Join(corpusDir(t), name)
			if _, err := os.Stat(filepath.Join(dir, madeBy)); err != nil {
				t.Errorf("no %s beside the capture: %v", madeBy, err)
			}
			c, err := report.ReadCapture(context.Background(), dir)
			if err != nil {
				t.Fatalf("the stored capture no longer reads: %v", err)
			}
			if _, err := report.ReadProfile(context.Background(), filepath.Join(dir, capdir.FileThreads)); err != nil {
				t.Fatalf("the stored capture no longer reads: %v", err)
			}
			if c.Profile == nil || c.Threads == nil || len(c.Profile.Sample) == 0 || len(c.Threads.Threads) == 0 {
				t.Fatalf("a stored capture without samples or threads checks little: %+v", c.Info.Counts)
			}
			a := analysis.Analyze(&c.Info, report.Samples(c.Profile), c.Threads)
			var again model.Info
			a.Into(&again)
			switch {
			case *update:
				rewriteAnalysis(t, name, a)
				a.Into(&c.Info)
			case !reflect.DeepEqual(again.Findings, c.Info.Findings):
				t.Errorf("drawn from the stored capture:\n%s\ncapture.json holds:\n%s\n(after a change to the findings: go test ./analysis -run TestCorpus -update)",
					findingsText(&report.Capture{Info: again}), findingsText(c))
			case again.Runtime != c.Info.Runtime:
				t.Errorf("the runtime recognised in the stored capture is %q, capture.json says %q", again.Runtime, c.Info.Runtime)
			}
			sc.expect(t, c)
		})
	}
}

// rewriteAnalysis puts what is drawn again into a stored capture's
// capture.json, written as capdir writes it.
func rewriteAnalysis(t *testing.T, name string, a analysis.Analysis) {
	t.Helper()
	file := filepath.Join(corpusDir(t), name, capdir.FileInfo)
	d, err := capdir.Open(filepath.Dir(file))
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	a.Into(&d.Info)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&d.Info); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCorpusCoversEveryFinding: each kind of finding is drawn from some
// stored capture, and each scenario has its capture stored.
func TestCorpusCoversEveryFinding(t *testing.T) {
	stored := corpus(t)
	seen := map[model.FindingKind]bool{}
	for _, name := range stored {
		d, err := capdir.Open(filepath.Join(corpusDir(t), name))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range d.Info.Findings {
			seen[f.Kind] = true
		}
		d.Close()
	}
	for _, k := range []model.FindingKind{model.FindingStopped, model.FindingDeadlock, model.FindingRuntimePause,
		model.FindingEventLoopBlocked, model.FindingGIL, model.FindingLockConvoy, model.FindingUninterruptible,
		model.FindingCPUStarvation, model.FindingSpinning, model.FindingHotThread, model.FindingMissingJITSymbols,
		model.FindingAllWaiting, model.FindingCPUThrottled, model.FindingMemoryPressure, model.FindingBlockedOnPeer} {
		if !seen[k] {
			t.Errorf("no stored capture has a %s finding", k)
		}
	}
	for _, sc := range scenarios {
		if !slices.Contains(stored, sc.name) {
			t.Errorf("scenario %s has no stored capture: make corpus", sc.name)
		}
	}
}
