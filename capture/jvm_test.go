package capture

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/target"
)

// spinShare is the share of a profile's on-CPU samples whose stacks run
// through a frame named like name.
func spinShare(t *testing.T, p *profile.Profile, name string) (named, total int64) {
	t.Helper()
	ci := valueIndex(t, p, model.TypeCPUSamples)
	for _, s := range p.Sample {
		if threadName(s) != "spinner-1" {
			continue
		}
		total += s.Value[ci]
		for _, n := range funcs(s) {
			if strings.Contains(n, name) {
				named += s.Value[ci]
				break
			}
		}
	}
	return named, total
}

// TestRecordJVMPerfMap: a JVM started with no flag gets its compiled code
// named: the capture asks it for its perf map through its attach
// mechanism, and says so.
func TestRecordJVMPerfMap(t *testing.T) {
	testutil.RequirePerf(t)
	tg := testutil.StartJava(t, nil, "spin")
	_, p, info := record(t, tg.Pid, 2*time.Second, func(c *Config) { c.NoOffCPU = true })
	note := ""
	for _, n := range info.Notes {
		if strings.HasPrefix(n, "JIT names:") {
			note = n
		}
	}
	if !strings.Contains(note, "the JVM's perf map, written when asked through its attach mechanism") {
		t.Errorf("notes %q, want the JIT names' from the JVM's perf map", info.Notes)
	}
	if named, total := spinShare(t, p, "Spinner.spin"); total == 0 || float64(named) < 0.9*float64(total) {
		t.Errorf("Spinner.spin in %d of spinner-1's %d CPU samples", named, total)
	}
}

// TestRecordJVMAtSafepoint: a JVM held at a safepoint cannot answer; its
// compiled code is named from its code cache, read from its memory, and
// the capture says why.
func TestRecordJVMAtSafepoint(t *testing.T) {
	testutil.RequirePerf(t)
	tg := testutil.StartJava(t, []string{"-XX:-UseCountedLoopSafepoints"}, "safepoint")
	_, p, info := record(t, tg.Pid, 3*time.Second, func(c *Config) { c.NoOffCPU = true })
	note := ""
	for _, n := range info.Notes {
		if strings.HasPrefix(n, "JIT names:") {
			note = n
		}
	}
	if !strings.Contains(note, "code cache read from its memory") || !strings.Contains(note, "did not answer") {
		t.Errorf("notes %q, want the JIT names from the code cache because the JVM did not answer", info.Notes)
	}
	if named, total := spinShare(t, p, "Spinner.spin"); total == 0 || float64(named) < 0.9*float64(total) {
		t.Errorf("Spinner.spin in %d of spinner-1's %d CPU samples", named, total)
	}
}

// TestRecordJVMThreadDump: where the JVM's memory cannot be read (a
// HotSpot whose layout the reader does not know: here, made to fail),
// its Java threads come from its own thread dump, asked through its
// attach mechanism once the snapshot's stops are over: the capture's
// snapshot has the Java-level deadlock, and its notes say where it came
// from.
func TestRecordJVMThreadDump(t *testing.T) {
	testutil.RequirePerf(t)
	defer func(f func(*target.Process) error) { jvmMemory = f }(jvmMemory)
	jvmMemory = func(*target.Process) error { return errors.New("a layout the reader does not know") }
	tg := testutil.StartJava(t, nil, "deadlock")
	res, _, info := record(t, tg.Pid, time.Second, func(c *Config) { c.NoOffCPU, c.Snapshot = true, true })
	found := false
	for _, n := range info.Notes {
		found = found || strings.HasPrefix(n, "Java threads:") && strings.Contains(n, "from the JVM's thread dump (jcmd Thread.print -l")
	}
	if !found {
		t.Errorf("notes %q, want the Java threads from the JVM's thread dump", info.Notes)
	}
	f, err := os.Open(filepath.Join(res.Dir, capdir.FileThreadJSON))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	snap, err := model.ReadSnapshotJSON(f, "threads.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Locks.Cycles) != 1 {
		t.Fatalf("cycles %v", snap.Locks.Cycles)
	}
	byTID := snap.ByTID()
	var names []string
	for _, tid := range snap.Locks.Cycles[0] {
		th := byTID[tid]
		names = append(names, th.Name)
		if th.Wait == nil || th.Wait.Kind != "java monitor" || th.Wait.OwnerSite == "" {
			t.Errorf("%q waits for %+v", th.Name, th.Wait)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"transfer-1", "transfer-2"}) {
		t.Errorf("deadlocked %q", names)
	}
}

// TestPeriodsJVM: a JVM started with no flag, profiled continuously with
// no capture: each period names its compiled Java code, from the perf
// map the JVM is asked for at the period's end, and its notes say so.
func TestPeriodsJVM(t *testing.T) {
	testutil.RequirePerf(t)
	tg := testutil.StartJava(t, nil, "spin")
	s, err := Open(Config{PID: tg.Pid, Out: t.TempDir(), NoFlightRecorder: true, Profile: true, NoOffCPU: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 2 {
		testutil.WaitCPU(t, tg.Pid, time.Second, 30*time.Second)
		p, err := s.Period(Now())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(p.Notes, func(n string) bool {
			return strings.HasPrefix(n, "JIT names: the JVM's perf map, written when asked through its attach mechanism")
		}) {
			t.Errorf("period %d: notes %q, want the JIT names' from the JVM's perf map", i, p.Notes)
		}
		if named, total := spinShare(t, p.Profile, "Spinner.spin"); total == 0 || float64(named) < 0.9*float64(total) {
			t.Errorf("period %d: Spinner.spin in %d of spinner-1's %d CPU samples", i, named, total)
		}
	}
}
