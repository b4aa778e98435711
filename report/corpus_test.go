package report

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"html"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

var update = flag.Bool("update", false, "write first-screen.txt of each stored capture (testdata/captures) again from its files")

// firstScreen is the golden file beside each stored capture: the first
// screen of its report.txt.
const firstScreen = "first-screen.txt"

// TestCorpus renders every stored capture (testdata/captures: real
// captures of real targets, made by package analysis's scenarios) in
// every form, from its files alone, with no root and no live process:
// report.txt (its first screen against a golden file, first-screen.txt,
// which -update writes again after a change to the renderings),
// report.html, folded stacks and speedscope per phase, the profiles, the
// thread dump.
func TestCorpus(t *testing.T) {
	root := testutil.Testdata(t, "captures")
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		n++
		name := e.Name()
		t.Run(name, func(t *testing.T) {
			c, err := ReadCapture(context.Background(), filepath.Join(root, name))
			if err != nil {
				t.Fatalf("the stored capture no longer reads: %v", err)
			}
			t.Run("text", func(t *testing.T) { corpusText(t, root, name, c) })
			t.Run("html", func(t *testing.T) { corpusHTML(t, c) })
			t.Run("exports", func(t *testing.T) { corpusExports(t, c) })
			t.Run("threads", func(t *testing.T) { corpusThreads(t, c) })
		})
	}
	if n == 0 {
		t.Fatal("no stored captures in testdata/captures")
	}
}

func render(t *testing.T, c *Capture, name string) []byte {
	t.Helper()
	for _, f := range ReportFiles(c) {
		if f.Name == name {
			var b bytes.Buffer
			if err := f.Write(&b); err != nil {
				t.Fatal(err)
			}
			return b.Bytes()
		}
	}
	t.Fatalf("ReportFiles renders no %s", name)
	return nil
}

func corpusText(t *testing.T, root, name string, c *Capture) {
	full := render(t, c, capdir.FileText)
	for _, f := range c.Info.Findings {
		if !strings.Contains(string(full), "  * "+f.Summary+"\n") {
			t.Errorf("report.txt does not say the finding %q", f.Summary)
		}
	}
	var b bytes.Buffer
	writeTextSummary(&b, buildView(c))
	got := b.Bytes()
	if !bytes.HasPrefix(full, got) {
		t.Fatal("the first screen is not how report.txt begins")
	}
	golden := filepath.Join(root, name, firstScreen)
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./report -run TestCorpus -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the first screen of report.txt differs from %s (after a change to the renderings: go test ./report -run TestCorpus -update):\n%s",
			golden, firstDiff(string(want), string(got)))
	}
}

// firstDiff shows the first line where two texts part.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return "line " + strconv.Itoa(i+1) + ":\n  stored:   " + a + "\n  rendered: " + b
		}
	}
	return "(same lines)"
}

func corpusHTML(t *testing.T, c *Capture) {
	page := string(render(t, c, capdir.FileHTML))
	if !strings.HasPrefix(page, "<!DOCTYPE html>") || !strings.Contains(page, `id="sw-data"`) {
		t.Fatalf("not a report page: %.200s", page)
	}
	for _, f := range c.Info.Findings {
		if !strings.Contains(page, html.EscapeString(f.Summary)) {
			t.Errorf("report.html does not say the finding %q", f.Summary)
		}
	}
	for _, th := range c.Threads.Threads {
		if !strings.Contains(page, `data-tid="`+strconv.Itoa(th.TID)+`"`) {
			t.Errorf("report.html has no row for thread %d", th.TID)
		}
	}
}

// corpusExports: the folded stacks of each phase sum to the profile's
// default value of that phase, and speedscope's file is one speedscope
// reads.
func corpusExports(t *testing.T, c *Capture) {
	vi, err := valueIndex(c.Profile, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, ph := range phasesOf(c.Profile) {
		opt := ExportOptions{Phase: ph}
		var want int64
		for _, s := range c.Profile.Sample {
			if label(s, model.LabelPhase) == ph {
				want += s.Value[vi]
			}
		}
		var b bytes.Buffer
		if err := WriteFolded(&b, c.Profile, opt); err != nil {
			t.Fatal(err)
		}
		var got int64
		sc := bufio.NewScanner(&b)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			i := strings.LastIndexByte(sc.Text(), ' ')
			v, err := strconv.ParseInt(sc.Text()[i+1:], 10, 64)
			if i < 0 || err != nil || v <= 0 {
				t.Fatalf("phase %q: not a folded line: %q", ph, sc.Text())
			}
			got += v
		}
		if got != want {
			t.Errorf("phase %q: folded stacks sum to %d, the profile to %d", ph, got, want)
		}
		b.Reset()
		if err := WriteSpeedscope(&b, c.Profile, c.Title(), opt); err != nil {
			t.Fatal(err)
		}
		if err := checkSpeedscope(b.Bytes()); err != nil {
			t.Errorf("phase %q: speedscope: %v", ph, err)
		}
	}
}

// corpusThreads: the thread dump names every thread, and threads.pb.gz
// made from threads.json again has one sample per thread.
func corpusThreads(t *testing.T, c *Capture) {
	var b bytes.Buffer
	if err := WriteThreadDump(&b, c.Threads); err != nil {
		t.Fatal(err)
	}
	for _, th := range c.Threads.Threads {
		if !strings.Contains(b.String(), "tid "+strconv.Itoa(th.TID)+" ") {
			t.Errorf("the thread dump does not name thread %d", th.TID)
		}
	}
	p, err := BuildThreads(c.Threads)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != len(c.Threads.Threads) {
		t.Errorf("threads.pb.gz of %d threads has %d samples", len(c.Threads.Threads), len(p.Sample))
	}
	var pb bytes.Buffer
	if err := WriteProfile(&pb, c.Profile); err != nil {
		t.Fatal(err)
	}
	if _, err := decodeProfile(context.Background(), &pb, int64(pb.Len()), "profile.pb.gz", MaxProfileBytes); err != nil {
		t.Errorf("profile.pb.gz written again does not read: %v", err)
	}
}
