package main

import (
	"fmt"
	"io"
	"strings"
)

// goalRow is one row of the README's summary: issue 22's goals, each
// with the figure a run measured, the reference tool's beside it and
// whether the goal was met — decided from the run's median, never
// written by hand.
type goalRow struct {
	what, pkg, bench string // bench ending in "/": a row per sub-benchmark
	ours, ref        string // {metric} placeholders, as in perfRow
	goal             string
	metric           string  // the median the goal is decided on
	atMost           bool    // the goal is a ceiling (else a floor)
	bound            float64 // the goal's value of metric
}

var goalRows = []goalRow{
	{"capture end → written capture, frame pointers, warm", "capture", "BenchmarkEndToPprof/warm",
		"{cpu-s/end} CPU-s", "`perf report --stdio`: {cpu-s/perf-report} CPU-s ({x-faster-cpu}×)", "≥ 10×", "x-faster-cpu", false, 10},
	{"the same, 16 KiB stack copies, warm", "capture", "BenchmarkEndToPprofStackCopies/warm",
		"{cpu-s/end} + {unwind-cpu-s} CPU-s", "`perf report --stdio`: {cpu-s/perf-report} CPU-s ({x-faster-cpu}×)", "≥ 10×", "x-faster-cpu", false, 10},
	{"snapshot of 1,000 threads", "snapshot", "BenchmarkSnapshot/threads=1000",
		"{ms/snapshot} ms", "gdb: {gdb-ms} ms ({1/x-vs-gdb}×)", "≥ 10×", "x-vs-gdb", true, 0.1},
	{"longest stop of a thread in it", "snapshot", "BenchmarkSnapshot/threads=1000",
		"{max-stop-µs} µs, {threads-stopped} threads stopped", "every thread stopped: held longest {max-held-µs} µs", "≤ 2,000 µs", "max-stop-µs", true, 2000},
	{"records lost at the defaults", "capture", "BenchmarkLostSmallTargets/",
		"{lost-records} of {samples+intervals}", "`perf record -g`: {perf-lost-records} of {perf-samples}", "0", "lost-records", true, 0},
	{"stacks whole at the default stack copy", "target", "BenchmarkStackCopySize/",
		"{%-complete-default}%", "", "≥ 99%", "%-complete-default", false, 99},
	{"idle `watch` RSS", "cmd/stallwatch", "BenchmarkWatchIdle/baseline-off",
		"{rss-MB} MB", "", "≤ 25 MB", "rss-MB", true, 25},
	{"the same with the flight recorder", "cmd/stallwatch", "BenchmarkWatchIdle/baseline-49Hz-8-threads",
		"{rss-MB} MB", "", "≤ 30 MB", "rss-MB", true, 30},
	{"idle daemon, 250 targets, the host forking 50/s", "cmd/stallwatch", "BenchmarkDaemon",
		"{%core-idle-50-forks/s}% of a core at {host-forks/s-50-forks/s} forks/s ({bench-forks/s} the benchmark's)", "", "≤ 0.5%", "%core-idle-50-forks/s", true, 0.5},
	{"unwinding sampled stacks per CPU second", "target", "BenchmarkUnwindSamples/",
		"{samples/cpu-s}", "", "≥ 200,000", "samples/cpu-s", false, 200000},
}

// writeSummary writes the goals table: a row per goalRow (per
// sub-benchmark where it takes them all) with "met" or "not met" from
// the run's median, and the host's load; a benchmark the run lacks says
// so.
func writeSummary(w io.Writer, pkgs map[string]*pkg) {
	fmt.Fprintln(w, "| what | stallwatch | beside it, same run | goal | met | host |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range goalRows {
		rows := rowsOf(pkgs, r.pkg, r.bench, r.what)
		for _, x := range rows {
			b := x.bench
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", x.what, fill(r.ours, b), fill(r.ref, b), r.goal, r.met(b), fill("load {host-load}", b))
		}
		if len(rows) == 0 {
			fmt.Fprintf(w, "| %s | not in this run | | %s | | |\n", r.what, r.goal)
		}
	}
}

// met says whether the run's median of the row's metric reaches the goal.
func (r goalRow) met(b *bench) string {
	v, ok := b.metrics[r.metric]
	if !ok {
		return "?"
	}
	x := median(v)
	if (r.atMost && x <= r.bound) || (!r.atMost && x >= r.bound) {
		return "met"
	}
	return "**not met**"
}

// row is a benchmark of the run and the name a table gives it.
type row struct {
	what  string
	bench *bench
}

// rowsOf lists, in the run's order, the benchmarks of the package whose
// path ends in pkgName that are named want — or start with it when want
// ends in "/", each then named what followed by its sub-benchmark's name.
func rowsOf(pkgs map[string]*pkg, pkgName, want, what string) []row {
	var out []row
	for _, p := range pkgs {
		if !strings.HasSuffix(p.name, "/"+pkgName) {
			continue
		}
		for _, name := range p.order {
			switch {
			case name == want:
				out = append(out, row{what, p.benches[name]})
			case strings.HasSuffix(want, "/") && strings.HasPrefix(name, want):
				out = append(out, row{what + ": " + strings.TrimPrefix(name, want), p.benches[name]})
			}
		}
	}
	return out
}
