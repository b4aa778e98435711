package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sampleRun = `pkg: github.com/stallwatch/stallwatch/snapshot
BenchmarkSnapshot/threads=1000-2   3  561239532 ns/op  2000 gdb-ms  2.000 host-cores  14.94 host-load  1.523 host-others-cores  500.0 ms/snapshot  0.25 x-vs-gdb
BenchmarkSnapshot/threads=1000-2   3  561239532 ns/op  2400 gdb-ms  2.000 host-cores  16.00 host-load  1.600 host-others-cores  400.0 ms/snapshot  0.2 x-vs-gdb
BenchmarkSnapshot/threads=1000-2   3  561239532 ns/op  2200 gdb-ms  2.000 host-cores  15.00 host-load  1.500 host-others-cores  600.0 ms/snapshot  0.3 x-vs-gdb
pkg: github.com/stallwatch/stallwatch/target
BenchmarkUnwindSamples/node-2   1  1 ns/op  375000 samples/cpu-s  250000 backlog-samples/cpu-s
BenchmarkUnwindSamples/c-depth-20-2   1  1 ns/op  891000 samples/cpu-s
pkg: github.com/stallwatch/stallwatch/sampler
BenchmarkRingBound-2   1  1 ns/op  62.5 MiB-1000-threads-16K  125 MiB-1000-threads-ceiling  128 KiB-per-thread-ceiling
`

// TestPerfTable: each row has the medians of the run's metrics (an
// inverse where asked), a row per sub-benchmark where the row takes
// them all, "?" for a metric the run lacks, "not in this run" for a
// benchmark it lacks, and "computed" for one that measured nothing.
func TestPerfTable(t *testing.T) {
	pkgs, _, err := parse(strings.NewReader(sampleRun), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	writePerfTable(&out, pkgs)
	for _, want := range []string{
		"| snapshot of 1,000 sleeping threads (Snapshot) | 500 ms;",
		"gdb `thread apply all bt`: 2200 ms | 4.00× faster | 3; load 15.00, others 1.52 of 2.00 cores |",
		"median ? µs",
		"per CPU second (UnwindSamples): node | 375000 samples/CPU-s as they arrive (250000 from a cold backlog)",
		"per CPU second (UnwindSamples): c-depth-20 | 891000 samples/CPU-s",
		"| idle daemon, 250 targets, the host forking 50 a second and more (Daemon) | not in this run |",
		"| 1; computed |", // RingBound reports no host: it measures nothing
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, out.String())
		}
	}
}

// TestUpdateDoc: each table between its markers is replaced, the rest
// of the document kept; a document without markers, or with an end
// marker before its begin, is an error.
func TestUpdateDoc(t *testing.T) {
	pkgs, _, _ := parse(strings.NewReader(sampleRun), io.Discard)
	perf, summary := tables[0], tables[1]
	path := filepath.Join(t.TempDir(), "doc.md")
	doc := "before\n" + perf.begin + "\nold table\n" + perf.end + "\nbetween\n" + summary.begin + "\nold summary\n" + summary.end + "\nafter\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := updateDoc(path, pkgs); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	s := string(got)
	if strings.Contains(s, "old table") || strings.Contains(s, "old summary") ||
		!strings.HasPrefix(s, "before\n"+perf.begin+"\n| what | stallwatch | reference") ||
		!strings.Contains(s, "|\n"+perf.end+"\nbetween\n"+summary.begin+"\n| what | stallwatch | beside it") ||
		!strings.HasSuffix(s, "|\n"+summary.end+"\nafter\n") {
		t.Errorf("updated document:\n%s", s)
	}
	for _, bad := range []string{"no markers\n", summary.end + "\n" + summary.begin + "\n"} {
		os.WriteFile(path, []byte(bad), 0o644)
		if err := updateDoc(path, pkgs); err == nil {
			t.Errorf("a document %q was updated", bad)
		}
	}
}

// TestSummaryMet: a goal is met or not from the run's median, floors
// and ceilings alike, and a metric the run lacks is "?", never "met".
func TestSummaryMet(t *testing.T) {
	pkgs, _, err := parse(strings.NewReader(sampleRun), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	writeSummary(&out, pkgs)
	for _, want := range []string{
		// x-vs-gdb median 0.25: 4× faster, the goal 10×.
		"| snapshot of 1,000 threads | 500 ms | gdb: 2200 ms (4.00×) | ≥ 10× | **not met** |",
		"| longest stop of a thread in it | ? µs, ? threads stopped | every thread stopped: held longest ? µs | ≤ 2,000 µs | ? |",
		"| unwinding sampled stacks per CPU second: node | 375000 |  | ≥ 200,000 | met |",
		"| unwinding sampled stacks per CPU second: c-depth-20 | 891000 |  | ≥ 200,000 | met |",
		"| idle daemon, 250 targets, the host forking 50/s | not in this run |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, out.String())
		}
	}
}
