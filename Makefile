# stallwatch — build, test, fuzz, benchmark, demo.
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X github.com/stallwatch/stallwatch/internal/version.Version=$(VERSION)
BIN       := bin/stallwatch
FUZZTIME  ?= 20s
BENCHCOUNT ?= 5

.PHONY: all build test test-short lint fuzz bench soak perf-table demo readme-demo clean deps man corpus corpus-update

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/stallwatch

# The suite, with the race detector. Tests that need perf_event_open,
# ptrace, gcc or node skip with a reason unless STALLWATCH_REQUIRE_PERF=1.
# The oracle tests that unwind and check every sample of real programs
# (ORACLES) run in a second pass without it: under -race they took 3-6
# times as long (236 s for TestCallersProvable alone) and what they check
# is the unwinder's answers, not concurrency, which the first pass covers
# in every package they use. The two passes run at once (their output
# printed one after the other): the suite's tests mostly wait on their
# targets' clocks (the test binaries used 0.2-0.6 CPU-s per second of
# their wall time, at load 7-15), so each fills the other's waits. GORACE's
# atexit_sleep_ms=0: the race runtime otherwise sleeps 1 s at the exit of
# every test binary, 55 of them (a race is reported when it is found, and
# fails the binary's exit status all the same). Each package's TestMain
# (testutil.Main) fails its run when the tests left files in its $TMPDIR,
# pid-named runtime files in /tmp or processes of its process group.
# TESTFLAGS adds go test flags to both passes (-v, -json, -p).
ORACLES = TestCallersProvable|TestGoStacksWhole|TestNodeJSFrames|TestPythonAttribution|TestPythonPerfTrampolinesAgree
TESTFLAGS ?=
test: lint
	@oracles=$$(mktemp); \
	$(GO) test $(TESTFLAGS) -timeout 20m -run '^($(ORACLES))$$' ./capture ./snapshot > $$oracles 2>&1 & opid=$$!; \
	GORACE=atexit_sleep_ms=0 $(GO) test $(TESTFLAGS) -race -timeout 20m -skip '^($(ORACLES))$$' ./...; race=$$?; \
	wait $$opid; ostatus=$$?; \
	echo "== the oracles, without -race"; cat $$oracles; rm -f $$oracles; \
	[ $$race = 0 ] && [ $$ostatus = 0 ]

# Unit tests only: every test that runs a target process (testutil.EndToEnd)
# skips with -short.
test-short:
	$(GO) test -short ./...

# staticcheck is a tool dependency pinned in go.mod (go get -tool), so it is
# built from the module cache, never fetched at its latest. The Kubernetes
# manifests are decoded strictly into k8s.io/api's types by deploy/validate,
# a module of its own (the main module's dependencies stay few); the systemd
# unit goes through systemd-analyze verify in cmd/stallwatch's tests.
lint:
	@fmt=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$fmt" ]; then echo "gofmt would change:"; echo "$$fmt"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff
	$(GO) tool staticcheck ./...
	cd deploy/validate && $(GO) mod tidy -diff && $(GO) vet . && $(GO) test . && $(GO) run . ../kubernetes/*.yaml

# Every fuzz target for FUZZTIME each; corpora live in <pkg>/testdata/fuzz.
fuzz:
	@set -e; for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

# Benchmarks side by side with the reference tools (perf, perf inject, gdb),
# BENCHCOUNT runs each, printed as a table of medians.
bench:
	$(GO) test -p 1 -run '^$$' -bench . -benchmem -count $(BENCHCOUNT) -timeout 60m ./... | tee bench.out | $(GO) run ./internal/benchtab

# Continuous profiling's accelerated soak: 1 s periods for 10 minutes of a
# JIT target that keeps compiling (make bench runs it for 2 minutes).
soak:
	STALLWATCH_SOAK=10m $(GO) test -run '^$$' -bench '^BenchmarkContinuousSoak$$' -benchtime 1x -count 1 -timeout 30m ./cmd/stallwatch

# docs/testing.md's performance table, from a run of the current code:
# the benchmarks of issue 22's table, each beside its reference tool in
# the same run, medians of PERFCOUNT runs with the host's load
# (internal/benchtab -update writes it between the file's markers; the
# table is never edited by hand), and README.md's summary of the goals,
# each met or not by that run. `make bench` prints both after its
# medians.
PERFCOUNT ?= 3
PERFBENCH := ^Benchmark(EndToPprof|EndToPprofStackCopies|LostSmallTargets|Snapshot|WatchIdle|Daemon|UnwindSamples|StackCopySize|TargetSlowdownStackCopy|RingBound)$$
perf-table:
	$(GO) test -p 1 -run '^$$' -bench '$(PERFBENCH)' -count $(PERFCOUNT) -timeout 60m ./capture ./snapshot ./cmd/stallwatch ./target ./sampler | tee bench-perf.out | $(GO) run ./internal/benchtab -update docs/testing.md -update README.md

# The stored captures the findings and the renderings are tested on
# (testdata/captures, each with a MADE-BY file): captured again from real
# targets (as root, with perf and the runtimes), their first screens
# rendered, then checked. After a change to the findings or the
# renderings, corpus-update draws them again from the stored files
# (capture.json's findings and runtime, first-screen.txt); review the
# diff before committing it.
corpus:
	rm -rf testdata/captures && mkdir testdata/captures
	STALLWATCH_REQUIRE_PERF=1 $(GO) test -count=1 -run '^TestFindingsLive$$' ./analysis -record-corpus
	$(MAKE) corpus-update
	$(GO) test -count=1 -run '^TestCorpus' ./analysis ./report

corpus-update:
	$(GO) test -count=1 -run '^TestCorpus$$' ./analysis -update
	$(GO) test -count=1 -run '^TestCorpus$$' ./report -update

# The manual page, made from the command table (a test checks it is current).
man:
	$(GO) run ./cmd/stallwatch man > docs/stallwatch.1

demo: build
	./testdata/demo/run.sh

# README.md's demo output, from a real run of make demo's script (checked
# as cmd/stallwatch's TestMakeDemo checks every run): never edited by hand.
readme-demo:
	$(GO) test -count=1 -run '^TestMakeDemo$$' ./cmd/stallwatch -args -update-readme

deps:
	./.ci/deps

clean:
	rm -rf bin bench.out bench-perf.out
