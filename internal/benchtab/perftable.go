package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// perfRow is one row of the performance table (docs/testing.md; issue
// 22's figures): a benchmark of a package, what it measured, what the
// reference tool measured in the same run, and their ratio. The texts
// name medians of the benchmark's metrics as {metric}.
type perfRow struct {
	what, pkg, bench string
	ours, ref, ratio string
}

var perfRows = []perfRow{
	{"end of a recording → written capture, frame pointers, warm (EndToPprof)", "capture", "BenchmarkEndToPprof/warm",
		"{cpu-s/end} CPU-s (resolve {resolve-cpu-s}, write {write-cpu-s}), {s/end} s wall; {samples} samples",
		"`perf report --stdio` on the same samples: {cpu-s/perf-report} CPU-s, {s/perf-report} s wall", "{x-faster-cpu}× CPU, {x-faster-wall}× wall"},
	{"the same, cold (page cache and object cache dropped)", "capture", "BenchmarkEndToPprof/cold",
		"{cpu-s/end} CPU-s, {s/end} s wall", "{cpu-s/perf-report} CPU-s, {s/perf-report} s wall", "{x-faster-cpu}× CPU, {x-faster-wall}× wall"},
	{"end of a recording with 16 KiB stack copies, warm (EndToPprofStackCopies)", "capture", "BenchmarkEndToPprofStackCopies/warm",
		"{cpu-s/end} CPU-s + {unwind-cpu-s} CPU-s unwinding the copies; {samples} samples",
		"`perf report --stdio` on the same `--call-graph dwarf,16384` samples: {cpu-s/perf-report} CPU-s", "{x-faster-cpu}× CPU"},
	{"the same, cold", "capture", "BenchmarkEndToPprofStackCopies/cold",
		"{cpu-s/end} CPU-s + {unwind-cpu-s} CPU-s unwinding", "{cpu-s/perf-report} CPU-s", "{x-faster-cpu}× CPU"},
	{"snapshot of 1,000 sleeping threads (Snapshot)", "snapshot", "BenchmarkSnapshot/threads=1000",
		"{ms/snapshot} ms; {threads-stopped} threads stopped (longest stop {max-stop-µs} µs): threads asleep in a system call are read without one. Every thread stopped (the stop path alone): {all-stopped-ms/snapshot} ms ({1/all-stopped-x-vs-gdb}× faster than gdb), each thread's stop median {median-stop-µs} µs, p99 {p99-stop-µs} µs, longest {all-stopped-max-stop-µs} µs (held after the stop was seen: median {median-held-µs}, p99 {p99-held-µs}, longest {max-held-µs} µs)",
		"gdb `thread apply all bt`: {gdb-ms} ms", "{1/x-vs-gdb}× faster"},
	{"idle `watch`, no flight recorder (WatchIdle)", "cmd/stallwatch", "BenchmarkWatchIdle/baseline-off",
		"{rss-MB} MB RSS, {cpu-%}% of a core", "budget 25 MB, 0.1%", "{rss-of-budget} of the RSS budget"},
	{"idle `watch`, flight recorder 49 Hz, 8 threads", "cmd/stallwatch", "BenchmarkWatchIdle/baseline-49Hz-8-threads",
		"{rss-MB} MB RSS, {cpu-%}% of a core", "budget 30 MB, 1%", "{rss-of-budget} of the RSS budget"},
	{"idle daemon, 250 targets, the host forking 50 a second and more (Daemon)", "cmd/stallwatch", "BenchmarkDaemon",
		"{%core-idle-50-forks/s}% of a core at {host-forks/s-50-forks/s} forks/s ({bench-forks/s} the benchmark's, {others-forks/s-50-forks/s} others'); {%core-idle}% at the others' {host-forks/s} alone; {MB-rss} MB RSS",
		"goal 0.5% at 50 forks/s", "—"},
	{"unwinding sampled stacks, warm, per CPU second (UnwindSamples)", "target", "BenchmarkUnwindSamples/",
		"{samples/cpu-s} samples/CPU-s as they arrive ({backlog-samples/cpu-s} from a cold backlog), {frames/sample} frames each", "the same without the rule cache: {uncached-samples/cpu-s}", "{x-vs-uncached}×"},
	{"records lost by a recording at the defaults, 4 s (LostSmallTargets)", "capture", "BenchmarkLostSmallTargets/",
		"{lost-records} of {samples+intervals}", "`perf record -g` at the same time: {perf-lost-records} of {perf-samples}", "—"},
	{"samples whose stack copy reaches the thread's first function (StackCopySize)", "target", "BenchmarkStackCopySize/",
		"8 KiB: {%-complete-8KiB}%, 16 KiB: {%-complete-16KiB}%, 32 KiB: {%-complete-32KiB}%; needed p99 {bytes-p99} bytes; the default (16 KiB, growing per thread): {%-complete-default}%, grown to {default-bytes-max} bytes", "perf's default: 8 KiB", "—"},
	{"target slowdown per 1 kHz of samples with stack copies (TargetSlowdownStackCopy)", "sampler", "BenchmarkTargetSlowdownStackCopy",
		"16 KiB {copy16K-%-per-kHz}%, 32 KiB {copy32K-%-per-kHz}%, 60 KiB {copy60K-%-per-kHz}% (frame pointers only: {fp-%-per-kHz}%)",
		"`perf record --call-graph dwarf,SIZE`: 16 KiB {perf-dwarf16K-%-per-kHz}%, 32 KiB {perf-dwarf32K-%-per-kHz}%, 60 KiB {perf-dwarf60K-%-per-kHz}%",
		// No ratio: slowdowns of a few percent, each the difference of
		// two noisy rates, give ratios of noise (a median of -0.05× in
		// one run); the two sides' percentages are the comparison.
		"—"},
	{"ring memory of 1,000 threads by the sizing policy (RingBound; computed)", "sampler", "BenchmarkRingBound",
		"{MiB-1000-threads-16K} MiB at 16 KiB copies; {MiB-1000-threads-ceiling} MiB once every thread grew to 60 KiB ({KiB-per-thread-ceiling} KiB each)", "—", "—"},
}

var placeholder = regexp.MustCompile(`\{([^}]+)\}`)

// writePerfTable writes the performance table of what the run measured,
// in markdown: a row per sub-benchmark the run has of each perfRow (a
// bench ending in "/" takes all of its sub-benchmarks), its medians and
// the host's load beside it; a row the run lacks says so.
func writePerfTable(w io.Writer, pkgs map[string]*pkg) {
	fmt.Fprintln(w, "| what | stallwatch | reference, same run | ratio | runs, host |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range perfRows {
		rows := rowsOf(pkgs, r.pkg, r.bench, r.what)
		for _, x := range rows {
			b := x.bench
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", x.what, fill(r.ours, b), fill(r.ref, b), fill(r.ratio, b), hostOf(b))
		}
		if len(rows) == 0 {
			fmt.Fprintf(w, "| %s | not in this run | | | |\n", r.what)
		}
	}
}

// fill replaces each {metric} of s by the benchmark's median of it
// ({1/metric}: its inverse), "?" where the benchmark did not report it.
func fill(s string, b *bench) string {
	return placeholder.ReplaceAllStringFunc(s, func(m string) string {
		name := m[1 : len(m)-1]
		inv := strings.HasPrefix(name, "1/")
		name = strings.TrimPrefix(name, "1/")
		v, ok := b.metrics[name]
		if !ok {
			return "?"
		}
		x := median(v)
		if inv && x != 0 {
			x = 1 / x
		}
		return format(x)
	})
}

func hostOf(b *bench) string {
	runs := 0
	for _, v := range b.metrics {
		runs = max(runs, len(v))
	}
	if _, measured := b.metrics["host-load"]; !measured {
		// A figure computed from the policy, not measured: the host's
		// load has no bearing on it.
		return fmt.Sprintf("%d; computed", runs)
	}
	return fill(fmt.Sprintf("%d; load {host-load}, others {host-others-cores} of {host-cores} cores", runs), b)
}

// A generated table and the markers around it in a document: the full
// performance table (docs/testing.md) and its summary against the goals
// (README.md). A document holds either or both.
type table struct {
	begin, end string
	write      func(io.Writer, map[string]*pkg)
}

var tables = []table{
	{"<!-- benchtab -perf begin: generated from a run's output, do not edit -->", "<!-- benchtab -perf end -->", writePerfTable},
	{"<!-- benchtab -summary begin: generated from a run's output, do not edit -->", "<!-- benchtab -summary end -->", writeSummary},
}

// updateDoc replaces each generated table between its markers in the
// file at path; a file with no markers is an error, so that a renamed
// marker never leaves a table silently stale.
func updateDoc(path string, pkgs map[string]*pkg) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	replaced := 0
	for _, t := range tables {
		i, j := bytes.Index(doc, []byte(t.begin)), bytes.Index(doc, []byte(t.end))
		if i < 0 && j < 0 {
			continue
		}
		if i < 0 || j < i {
			return fmt.Errorf("%s: %q without %q before it", path, t.end, t.begin)
		}
		var tab bytes.Buffer
		tab.WriteString(t.begin + "\n")
		t.write(&tab, pkgs)
		doc = append(append(append([]byte(nil), doc[:i]...), tab.Bytes()...), doc[j:]...)
		replaced++
	}
	if replaced == 0 {
		return fmt.Errorf("%s: no benchtab markers (%q … %q) to replace", path, tables[0].begin, tables[0].end)
	}
	return os.WriteFile(path, doc, 0o644)
}
