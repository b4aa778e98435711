// Command benchtab reads `go test -bench` output on stdin and prints one
// table per package: each benchmark with the median of every metric over
// its runs (-count), so that noisy machines still give comparable figures.
// Metrics a benchmark reports with b.ReportMetric (ratios against perf,
// perf inject or gdb, MB/s, lookups/s) get a column each.
//
// After the tables it prints the performance table (perftable.go: each
// benchmark of issue 22's table with its reference tool's figure from
// the same run and the host's load) and the summary of issue 22's goals,
// each met or not; -update FILE (repeatable) writes them into FILE
// between their markers instead (docs/testing.md's table, README.md's
// summary: `make perf-table`).
//
// Usage: go test -run '^$' -bench . -count 5 ./... | go run ./internal/benchtab [-update FILE]...
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

type bench struct {
	name    string
	order   []string
	metrics map[string][]float64
}

type pkg struct {
	name    string
	order   []string
	benches map[string]*bench
}

func main() {
	var update []string
	flag.Func("update", "write the generated tables into this file, between their markers (repeatable)", func(path string) error {
		update = append(update, path)
		return nil
	})
	flag.Parse()
	pkgs, order, err := parse(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtab:", err)
		os.Exit(1)
	}
	for _, name := range order {
		print(os.Stdout, pkgs[name])
	}
	if len(update) > 0 {
		for _, path := range update {
			if err := updateDoc(path, pkgs); err != nil {
				fmt.Fprintln(os.Stderr, "benchtab:", err)
				os.Exit(1)
			}
		}
		return
	}
	fmt.Fprintln(os.Stdout, "\nperformance table (docs/testing.md)")
	writePerfTable(os.Stdout, pkgs)
	fmt.Fprintln(os.Stdout, "\ngoals (README.md)")
	writeSummary(os.Stdout, pkgs)
}

// parse reads the benchmark output, echoing lines that are not results
// (figures benchmarks print with b.Log, failures) so nothing is hidden.
func parse(r io.Reader, echo io.Writer) (map[string]*pkg, []string, error) {
	pkgs := map[string]*pkg{}
	var order []string
	cur := &pkg{name: "?", benches: map[string]*bench{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "pkg: "):
			name := strings.TrimPrefix(line, "pkg: ")
			if p, ok := pkgs[name]; ok {
				cur = p
			} else {
				cur = &pkg{name: name, benches: map[string]*bench{}}
				pkgs[name] = cur
				order = append(order, name)
			}
		case strings.HasPrefix(line, "Benchmark"):
			f := strings.Fields(line)
			if len(f) < 4 {
				fmt.Fprintln(echo, line)
				continue
			}
			name := stripProcs(f[0])
			b, ok := cur.benches[name]
			if !ok {
				b = &bench{name: name, metrics: map[string][]float64{}}
				cur.benches[name] = b
				cur.order = append(cur.order, name)
			}
			for i := 2; i+1 < len(f); i += 2 {
				v, err := strconv.ParseFloat(f[i], 64)
				if err != nil {
					continue
				}
				unit := f[i+1]
				if _, seen := b.metrics[unit]; !seen {
					b.order = append(b.order, unit)
				}
				b.metrics[unit] = append(b.metrics[unit], v)
			}
		case strings.HasPrefix(line, "goos:"), strings.HasPrefix(line, "goarch:"), strings.HasPrefix(line, "cpu:"),
			line == "PASS", strings.HasPrefix(line, "ok "):
		default:
			fmt.Fprintln(echo, line)
		}
	}
	return pkgs, order, sc.Err()
}

func stripProcs(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func format(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func print(w io.Writer, p *pkg) {
	if len(p.order) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s (medians)\n", p.name)
	for _, name := range p.order {
		b := p.benches[name]
		var cells []string
		runs := 0
		for _, unit := range b.order {
			vals := b.metrics[unit]
			runs = max(runs, len(vals))
			cells = append(cells, format(median(vals))+" "+unit)
		}
		fmt.Fprintf(w, "  %-48s n=%-2d %s\n", strings.TrimPrefix(name, "Benchmark"), runs, strings.Join(cells, "  "))
	}
}
