package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

func renderText(t *testing.T, c *Capture) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteText(&buf, c); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestWriteTextFirstScreen(t *testing.T) {
	out := renderText(t, fixtureCapture(t))
	screen, _, ok := strings.Cut(out, strings.Repeat("═", 78))
	if !ok {
		t.Fatalf("no details separator:\n%s", out)
	}
	if n := strings.Count(screen, "\n"); n > 50 {
		t.Errorf("the summary is %d lines; it must fit a screen (50):\n%s", n, screen)
	}
	// Everything issue 5 asks of report.txt is on the first screen, in
	// this order.
	wantInOrder := []string{
		"stallwatch STALL capture of pid 4242 (/usr/bin/app --serve)",
		"trigger     stall at 2026-01-05 14:30:12.345 UTC — no heartbeat for 10.2s (heartbeat: file /run/app.beat)",
		"stall       heartbeat silent for 10.2s at the trigger; not recovered when this was written",
		"window      2026-01-05 14:29:42.345 UTC → 14:30:22.345 (40s: 30s before the trigger, 10s after)",
		"collected   101 on-CPU samples, 6 off-CPU intervals (11 from before the trigger), 8 threads, 1 JIT source",
		"LOST        3 perf records",
		"note        /proc/<pid>/sched is absent",
		`DEADLOCK: tid 12 "lock-a" waits for tid 13 "lock-b" waits for tid 12 "lock-a".`,
		`1 thread in uninterruptible sleep (D) in io_schedule for 9s: tid 15 "disk".`,
		`CPU starvation: 1 thread was runnable but waiting for a CPU for 20% or more of the window during the stall; tid 14 "waiter" the most, 2s (20%).`,
		`Thread 11 "spinner" used 91ms of CPU during the stall`,
		"Threads (8; waiting first)",
		"TID      NAME             ST   OFF-CPU      RUNQ       CPU  TOP FRAME",
		"12       lock-a           S        12s       3ms        0s  lock_a (app.c:50)  ⟵ waits for tid 13",
		"15       disk             D         9s       3ms        0s  read_block (app.c:80)",
		"11       spinner          R          -      40ms      91ms  hash (hash.h:30)",
		"On-CPU stacks, during the stall (after the trigger) — total 91ms",
		`98.9%      90ms  hash ← spin ← worker ← start_thread ← __clone3   [tid 11 "spinner"]`,
		"Off-CPU stacks, during the stall (after the trigger) — total 18s",
		`27.8%        5s  futex_wait_queue ← … ← lock_a ← worker ← start_thread ← __clone3   [tid 12 "lock-a"]`,
		"On-CPU stacks, before the trigger (flight recorder) — total 10ms",
		"Off-CPU stacks, before the trigger (flight recorder) — total 300ms",
	}
	at := 0
	for _, w := range wantInOrder {
		i := strings.Index(screen[at:], w)
		if i < 0 {
			t.Fatalf("first screen lacks (after offset %d) %q:\n%s", at, w, screen)
		}
		at += i + len(w)
	}
	// The thread table lists waiting threads before the running one.
	if strings.Index(screen, "  15       disk") > strings.Index(screen, "  11       spinner") {
		t.Error("the D-state thread should come before the running one")
	}
}

func TestWriteTextFitsScreenWhenBusy(t *testing.T) {
	// Many threads, many deadlocks, many notes: the first screen stays a
	// screen, and nothing is lost below it.
	c := fixtureCapture(t)
	snap := c.Threads
	for i := 0; i < 200; i++ {
		snap.Threads = append(snap.Threads, model.Thread{TID: 1000 + i, Name: "pool", State: 'S', User: stackSleeper[3:]})
	}
	for i := 0; i < 6; i++ {
		a, b := 2000+2*i, 2001+2*i
		snap.Threads = append(snap.Threads,
			model.Thread{TID: a, Name: "dl", State: 'S', Wait: &model.Wait{Owner: b}},
			model.Thread{TID: b, Name: "dl", State: 'S', Wait: &model.Wait{Owner: a}})
		snap.Locks.Cycles = append(snap.Locks.Cycles, []int{a, b})
	}
	for i := 0; i < 10; i++ {
		c.Info.Notes = append(c.Info.Notes, fmt.Sprintf("note number %d", i))
	}
	out := renderText(t, analyzed(c))
	screen, details, _ := strings.Cut(out, strings.Repeat("═", 78))
	if n := strings.Count(screen, "\n"); n > 60 {
		t.Errorf("the summary is %d lines:\n%s", n, screen)
	}
	for _, want := range []string{"… 7 more in the details below", "… and 4 more deadlocks: see the lock graph below.", "Threads (220; waiting first; 10 shown, all in the thread dump below)"} {
		if !strings.Contains(screen, want) {
			t.Errorf("first screen lacks %q:\n%s", want, screen)
		}
	}
	for _, want := range []string{"note number 9", "DEADLOCK 7:", "tid 1199 "} {
		if !strings.Contains(details, want) {
			t.Errorf("details lack %q", want)
		}
	}
}

func TestWriteTextDetails(t *testing.T) {
	out := renderText(t, fixtureCapture(t))
	_, details, _ := strings.Cut(out, strings.Repeat("═", 78))
	for _, want := range []string{
		"Top functions (flat: where the time was; cum: under it)",
		"    k futex_wait_queue",
		"    j handler (app.js:3)",
		"      hash (hash.h:30)",
		"Thread dump of pid 4242",
		"DEADLOCK 1:",
		"Profile comments",
	} {
		if !strings.Contains(details, want) {
			t.Errorf("details lack %q", want)
		}
	}
}

func TestWriteTextFlags(t *testing.T) {
	c := fixtureCapture(t)
	c.Info.CutShort, c.Info.CutShortWhy = true, "SIGTERM"
	c.Info.TargetExited = true
	c.Info.Counts.Lost = 0
	c.Info.Counts.MissingSymbols = 2
	out := renderText(t, c)
	for _, want := range []string{
		"CUT SHORT   SIGTERM: the files hold what was collected until then",
		"TARGET EXITED the process exited during the capture",
		"lost        nothing (0 perf records lost, no throttling)",
		"missing     2 mappings without symbols",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestWriteTextRecord(t *testing.T) {
	// `stallwatch record`: no phases, no snapshot.
	var samples []model.Sample
	for _, s := range fixtureSamples() {
		s.Phase = ""
		samples = append(samples, s)
	}
	p, err := BuildProfile(samples, fixtureMeta())
	if err != nil {
		t.Fatal(err)
	}
	out := renderText(t, analyzed(&Capture{Info: model.Info{Trigger: model.Manual, PID: 4242}, Profile: p}))
	if !strings.Contains(out, "On-CPU stacks — total 101ms") || !strings.Contains(out, "Off-CPU stacks — total 18.3s") {
		t.Errorf("record report:\n%s", out)
	}
	if strings.Contains(out, "during the stall") || strings.Contains(out, "Threads (") {
		t.Errorf("a record report has no phases and no thread table:\n%s", out)
	}
	if !strings.Contains(out, `Thread 11 "spinner" used 101ms of CPU in the capture`) {
		t.Errorf("record findings:\n%s", out)
	}
}

func TestWriteTextBlockedProcess(t *testing.T) {
	var samples []model.Sample
	for _, s := range fixtureSamples() {
		if s.OffCPU {
			samples = append(samples, s)
		}
	}
	p, err := BuildProfile(samples, fixtureMeta())
	if err != nil {
		t.Fatal(err)
	}
	out := renderText(t, analyzed(&Capture{Info: fixtureInfo(), Profile: p}))
	if !strings.Contains(out, "No thread ran on a CPU during the stall: the process is waiting, not busy") {
		t.Errorf("a fully blocked process is not called out:\n%s", out)
	}
}

func TestWriteTextIdleStacks(t *testing.T) {
	// Off-CPU, threads parked in system code only make way for those
	// blocked in the program's code, and are summed up as idle.
	idle := []*model.Location{kSleep, kEntry, lSleep, lStart, lClone}
	p, err := BuildProfile([]model.Sample{
		{Stack: idle, TID: 1, OffCPU: true, Nanos: int64(8 * time.Second)},
		{Stack: stackLockA, TID: 2, OffCPU: true, Nanos: int64(time.Second)},
	}, model.Meta{Period: 1})
	if err != nil {
		t.Fatal(err)
	}
	out := renderText(t, &Capture{Profile: p})
	want := "Off-CPU stacks — total 9s\n" +
		"   11.1%        1s  futex_wait_queue ← … ← lock_a ← worker ← start_thread ← __clone3   [tid 2]\n" +
		"   88.9%        8s  idle: 1 stack only in kernel, libc or runtime code\n"
	if !strings.Contains(out, want) {
		t.Errorf("report lacks\n%s\nin:\n%s", want, out)
	}
}

func TestWriteTextForeignProfile(t *testing.T) {
	// Any pprof file renders: here one with an unknown sample type.
	p, err := BuildProfile(fixtureSamples(), fixtureMeta())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range p.SampleType {
		st.Type = "x-" + st.Type
	}
	p.DefaultSampleType = ""
	out := renderText(t, &Capture{Profile: p})
	if !strings.Contains(out, "stallwatch profile") || !strings.Contains(out, "Stacks by x-wall-time, during the stall") {
		t.Errorf("foreign profile:\n%s", out)
	}
}

func renderHTML(t *testing.T, c *Capture) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteHTML(&buf, c); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestWriteHTML(t *testing.T) {
	c := fixtureCapture(t)
	c.Threads.Threads[1].Name = `</script><script>alert(1)</script>`
	out := renderHTML(t, c)

	// Self-contained: nothing fetched, no script but our own two
	// elements (the data and the viewer).
	for _, bad := range []string{"<link", "src=", "@import", "url(", "fetch(", "XMLHttpRequest", "import("} {
		if strings.Contains(out, bad) {
			t.Errorf("report.html contains %q: it must be self-contained", bad)
		}
	}
	if m := regexp.MustCompile(`https?://`).FindAllString(out, -1); len(m) > 0 {
		t.Errorf("report.html names URLs: %v", m)
	}
	if n := strings.Count(out, "<script"); n != 2 {
		t.Errorf("%d <script elements, want 2 (the data and the viewer)", n)
	}
	if !strings.Contains(out, "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("a thread name from the target is not escaped in the page")
	}
	for _, want := range []string{
		"<title>stallwatch STALL capture of pid 4242 (/usr/bin/app --serve)</title>",
		"no heartbeat for 10.2s", "DEADLOCK", "Threads (8; waiting first)",
		"On-CPU stacks, during the stall (after the trigger) — total 91ms",
		"Off-CPU stacks, during the stall (after the trigger) — total 18s",
		"Thread dump", "futex_wait_queue", `id="thread-12"`, `data-fn="lock_a"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	d := pageDataOf(t, out)
	if !strings.Contains(strings.Join(d.Strings, "\n"), "lock_a") {
		t.Error("the page's string table lacks lock_a")
	}
	var named bool
	for _, th := range d.Threads {
		named = named || th.Name == c.Threads.Threads[1].Name
	}
	if !named {
		t.Error("the hostile thread name did not survive the JSON as data")
	}
}

// pageDataOf decodes the JSON a page embeds, after checking that nothing
// in it could end its script element.
func pageDataOf(t *testing.T, page string) *pageData {
	t.Helper()
	m := regexp.MustCompile(`(?s)<script type="application/json" id="sw-data">(.*?)</script>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no sw-data element")
	}
	if strings.Contains(strings.ToLower(m[1]), "<") {
		t.Fatal("the page's JSON holds a '<'")
	}
	var d pageData
	if err := json.Unmarshal([]byte(m[1]), &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// TestPageData: the page's compact data adds up to the profile's totals,
// per mode and phase, and its call tree rebuilds the stacks.
func TestPageData(t *testing.T) {
	c := fixtureCapture(t)
	d := pageDataOf(t, renderHTML(t, c))
	if len(d.Modes) != 3 || d.Modes[0].ID != "cpu" || d.Modes[2].ID != "wall" {
		t.Errorf("modes %+v", d.Modes)
	}
	sm := d.Samples
	n := len(sm.Thread)
	if len(sm.Node) != n || len(sm.End) != n || len(sm.Weight) != n || len(sm.Class) != n {
		t.Fatalf("sample columns differ in length: %d %d %d %d %d", n, len(sm.Node), len(sm.End), len(sm.Weight), len(sm.Class))
	}
	sums := map[[2]int64]int64{} // kind, phase → µs
	for i := 0; i < n; i++ {
		w := sm.Weight[i]
		if w == 0 && sm.Class[i]/3 == 0 {
			w = d.Period
		}
		sums[[2]int64{sm.Class[i] / 3, sm.Class[i] % 3}] += w
	}
	if got := sums[[2]int64{0, 0}]; got != 91000 {
		t.Errorf("on-CPU during: %dµs, want 91000", got)
	}
	if got := sums[[2]int64{1, 0}] + sums[[2]int64{2, 0}]; got != 18000000 {
		t.Errorf("off-CPU during: %dµs, want 18s", got)
	}
	if got := sums[[2]int64{2, 0}]; got != 2000000 {
		t.Errorf("runnable-waiting during: %dµs, want 2s", got)
	}
	// Frames say their kind as the viewer numbers it.
	wantKind := map[string]int64{"spin": 0, "futex_wait_queue": 1, "handler": 2}
	for i := 0; i+2 < len(d.Frames); i += 3 {
		if k, ok := wantKind[d.Strings[d.Frames[i]]]; ok && d.Frames[i+1] != k {
			t.Errorf("frame %s has kind %d, want %d", d.Strings[d.Frames[i]], d.Frames[i+1], k)
		}
	}
	// The call tree: every node's parent comes first, and a leaf's path
	// names a real stack.
	parent := func(nd int64) int64 { return nd - d.Nodes[2*nd] }
	for i := int64(1); i < int64(len(d.Nodes)/2); i++ {
		if p := parent(i); p < 0 || p >= i {
			t.Fatalf("node %d has parent %d", i, p)
		}
	}
	var path []string
	for i := 0; i < n; i++ {
		if d.Threads[sm.Thread[i]].TID != 12 || sm.Class[i] != 3 {
			continue
		}
		for nd := sm.Node[i]; nd != 0; nd = parent(nd) {
			path = append(path, d.Strings[d.Frames[3*d.Nodes[2*nd+1]]])
		}
		break
	}
	if strings.Join(path, ";") != "futex_wait_queue;do_futex;entry_SYSCALL_64_after_hwframe;__lll_lock_wait;lock_a;worker;start_thread;__clone3" {
		t.Errorf("tid 12's blocked stack from the page's tree: %v", path)
	}
}

func TestWriteFolded(t *testing.T) {
	p, err := BuildProfile([]model.Sample{
		{Stack: []*model.Location{aSpin, aWorker}, TID: 1, ThreadName: "spin", PID: 9, Count: 3, Phase: model.PhaseDuring},
		{Stack: []*model.Location{aSpin, aWorker}, TID: 2, ThreadName: "spin", PID: 9, Count: 2, Phase: model.PhaseBefore},
		{Stack: []*model.Location{kFutexWait, lLock, aLockA}, TID: 3, PID: 9, OffCPU: true, Nanos: 500, Phase: model.PhaseDuring},
		{Stack: []*model.Location{loc(mJIT, 0x7f2000000200, fn("a;b\nc", "", 0))}, TID: 4, ThreadName: "x;y", Count: 1, Phase: model.PhaseDuring},
	}, model.Meta{Period: 10})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opt  ExportOptions
		want string
	}{
		{"cpu-samples", ExportOptions{SampleType: "cpu-samples"},
			"spin-9/1;worker;spin;hash 3\nspin-9/2;worker;spin;hash 2\nx:y-4;a:b\\x0ac_[j] 1\n"},
		{"off-cpu-time", ExportOptions{SampleType: "off-cpu-time"}, "thread-9/3;lock_a;__lll_lock_wait;futex_wait_queue_[k] 500\n"},
		{"wall, threads merged", ExportOptions{NoThreads: true},
			"a:b\\x0ac_[j] 10\nlock_a;__lll_lock_wait;futex_wait_queue_[k] 500\nworker;spin;hash 50\n"},
		{"during", ExportOptions{Phase: model.PhaseDuring, NoThreads: true},
			"a:b\\x0ac_[j] 10\nlock_a;__lll_lock_wait;futex_wait_queue_[k] 500\nworker;spin;hash 30\n"},
		{"before", ExportOptions{Phase: model.PhaseBefore}, "spin-9/2;worker;spin;hash 20\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WriteFolded(&buf, p, tt.opt); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tt.want {
				t.Errorf("folded %+v:\n%s\nwant:\n%s", tt.opt, buf.String(), tt.want)
			}
		})
	}
	var ste *SampleTypeError
	if err := WriteFolded(io.Discard, p, ExportOptions{SampleType: "bogus"}); !errors.As(err, &ste) {
		t.Errorf("unknown sample type: %v", err)
	}
	var pe *PhaseError
	if err := WriteFolded(io.Discard, p, ExportOptions{Phase: "later"}); !errors.As(err, &pe) || !strings.Contains(err.Error(), "during, before") {
		t.Errorf("unknown phase: %v", err)
	}
}

// TestOffCPUFlatIsTheWaitSite: off-CPU top functions charge the program's
// frame nearest the wait, not the kernel's schedule() every stack has on
// top; on-CPU top functions charge the innermost frame.
func TestOffCPUFlatIsTheWaitSite(t *testing.T) {
	c := fixtureCapture(t)
	a := analyze(tableOf(c.Profile))
	flat := func(typ string) map[string]int64 {
		vi, err := valueIndex(c.Profile, typ)
		if err != nil {
			t.Fatal(err)
		}
		vals, _ := a.totals(vi, nil)
		m := map[string]int64{}
		for _, f := range a.funcs(vals, typ == model.TypeOffCPUTime) {
			m[f.name] = f.flat
		}
		return m
	}
	off := flat(model.TypeOffCPUTime)
	for _, kernel := range []string{"futex_wait_queue", "schedule", "hrtimer_nanosleep", "io_schedule"} {
		if off[kernel] != 0 {
			t.Errorf("off-CPU flat of kernel function %s = %d, want 0", kernel, off[kernel])
		}
	}
	for _, wait := range []string{"lock_a", "lock_b", "handler", "read_block"} {
		if off[wait] == 0 {
			t.Errorf("off-CPU flat of wait site %s = 0; flat: %v", wait, off)
		}
	}
	if on := flat(model.TypeCPUSamples); on["hash"] == 0 {
		t.Errorf("on-CPU flat of the innermost (inlined) frame hash = 0: %v", on)
	}
	var b strings.Builder
	if err := WriteText(&b, c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "flat: the program's frame nearest the wait") {
		t.Error("report.txt does not say what off-CPU flat means")
	}
}

// TestThreadTableKeepsBlocked: the first screen's thread table of a JVM
// whose twenty threads of its own idle since start-up shows its
// application's threads — the two in a deadlock and the one sleeping
// beside them — and, when more threads wait for another than it has rows,
// fills them with those and says how many more there are. (It showed 10 of 22 threads of such a JVM, without the three:
// every thread waited on a futex with no owner known, and the VM's own,
// off the CPU the longest, came first.)
func TestThreadTableKeepsBlocked(t *testing.T) {
	libjvm := &model.Mapping{File: "/usr/lib/jvm/java-17/lib/server/libjvm.so", Kind: model.KindNative}
	java := &model.Mapping{File: model.JavaMapping, Kind: model.KindJIT}
	loc := func(m *model.Mapping, fn string) *model.Location {
		return &model.Location{Addr: 0x1000, Mapping: m, Kind: m.Kind, Lines: []model.Line{{Function: fn}}}
	}
	idle := []*model.Location{loc(libjvm, "os::PlatformMonitor::wait"), loc(libjvm, "Thread::call_run")}
	var threads []model.Thread
	for i := range 19 {
		threads = append(threads, model.Thread{TID: 100 + i, Name: fmt.Sprintf("GC Thread#%d", i), State: 'S',
			OffCPUKnown: true, OffCPUFor: time.Hour, User: idle,
			Wait: &model.Wait{Kind: "futex", Desc: "a signal on the condition variable near 0x7f00 (no owner)"}})
	}
	app := func(tid int, name, fn string, w *model.Wait) model.Thread {
		return model.Thread{TID: tid, Name: name, State: 'S', OffCPUKnown: true, OffCPUFor: time.Second, Wait: w,
			User: []*model.Location{loc(libjvm, "os::PlatformEvent::park"), loc(java, fn)}}
	}
	threads = append(threads,
		app(200, "transfer-1", "Ledger.settleSavingsFrom", &model.Wait{Kind: "java monitor", Owner: 201, Desc: "Java monitor <0x10> (a java.lang.Object)"}),
		app(201, "transfer-2", "Ledger.settleCheckingFrom", &model.Wait{Kind: "java monitor", Owner: 200, Desc: "Java monitor <0x20> (a java.lang.Object)"}),
		app(202, "heartbeat", "java.lang.Thread.sleep", &model.Wait{Kind: "java sleep", Desc: "Thread.sleep"}))
	snap := &model.Snapshot{PID: 1, Threads: threads}
	snap.Locks = model.BuildLockGraph(snap.Threads)
	out := renderText(t, analyzed(&Capture{Info: model.Info{Trigger: model.Manual, PID: 1}, Threads: snap}))
	table := out[strings.Index(out, "Threads ("):]
	table = table[:strings.Index(table, "\n\n")]
	for _, name := range []string{"transfer-1", "transfer-2", "heartbeat"} {
		if !strings.Contains(table, name) {
			t.Errorf("%s not in the first screen's table:\n%s", name, table)
		}
	}

	// Fifteen threads waiting for another, more than the screen's ten
	// rows: the rows are theirs, and the table says how many more the
	// dump holds.
	threads = threads[:19]
	for i := range 15 {
		threads = append(threads, app(300+i, fmt.Sprintf("worker-%d", i), "Pool.take", &model.Wait{Kind: "java monitor", Owner: 400, Desc: "Java monitor <0x30> (a Pool)"}))
	}
	snap = &model.Snapshot{PID: 1, Threads: threads}
	snap.Locks = model.BuildLockGraph(snap.Threads)
	out = renderText(t, analyzed(&Capture{Info: model.Info{Trigger: model.Manual, PID: 1}, Threads: snap}))
	table = out[strings.Index(out, "Threads ("):]
	table = table[:strings.Index(table, "\n\n")]
	if n := strings.Count(table, "worker-"); n != 10 || strings.Contains(table, "GC Thread") ||
		!strings.Contains(table, "… 5 more threads deadlocked, waiting for another or in uninterruptible sleep: in the thread dump below") {
		t.Errorf("%d of the 15 waiting threads in the first screen's table, and no word of the rest:\n%s", n, table)
	}
}

// TestPageJSONIsJSONMarshal: the page's JSON, appended by hand, is
// json.Marshal's encoding of its data byte for byte — for the stored
// captures, the fixture (a hostile thread name among its strings), one
// built from samples, and a capture of nothing.
func TestPageJSONIsJSONMarshal(t *testing.T) {
	caps := map[string]*Capture{"fixture": fixtureCapture(t), "built": builtFixtureCapture(t), "empty": {}}
	root := testutil.Testdata(t, "captures")
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			c, err := ReadCapture(context.Background(), filepath.Join(root, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			caps[e.Name()] = c
		}
	}
	for name, c := range caps {
		t.Run(name, func(t *testing.T) {
			d := buildPageData(buildView(c), c)
			want, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pageJSON(d)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("pageJSON wrote\n%.2000s\njson.Marshal\n%.2000s", got, want)
			}
		})
	}
}

// TestCommonPeriod: the most common on-CPU weight, counted a run at a
// time, is the one a count of every sample gives.
func TestCommonPeriod(t *testing.T) {
	on, off := int64(classOnCPU*3), int64(classBlocked*3)
	cases := []struct {
		name          string
		weight, class column
		want          int64
	}{
		{"none", nil, nil, 0},
		{"off-CPU only", column{5, 5}, column{off, off}, 0},
		{"one run", column{7, 7, 7}, column{on, on + 1, on + 2}, 7},
		{"runs of the same weight add up", column{3, 3, 9, 9, 9, 3, 3}, column{on, on, on, on, on, on, on}, 3},
		{"off-CPU samples do not break a run's count", column{4, 100, 4, 4, 8, 8}, column{on, off, on, on, on, on}, 4},
		{"a tie goes to the smaller", column{9, 9, 2, 2}, column{on, on, on, on}, 2},
		{"off-CPU weight not counted", column{6, 1, 1, 1}, column{on, off, off, off}, 6},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := commonPeriod(c.weight, c.class); got != c.want {
				t.Errorf("commonPeriod = %d, want %d", got, c.want)
			}
		})
	}
}
