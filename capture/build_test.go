package capture

import (
	"bytes"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/unwind"
	"github.com/stallwatch/stallwatch/jit"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
	"github.com/stallwatch/stallwatch/sampler"
	"github.com/stallwatch/stallwatch/symbolize"
	"github.com/stallwatch/stallwatch/target"
)

// TestNotesJITBound: what the JIT index's memory bound cost a capture is
// said in its notes, never dropped silently.
func TestNotesJITBound(t *testing.T) {
	f := &facts{symStats: symbolize.Stats{JIT: []jit.SourceInfo{
		{Path: "/tmp/jit-1.dump", Kind: jit.KindJitdump, Dropped: 3, Forgotten: 5},
		{Path: "/tmp/jit-2.dump", Kind: jit.KindJitdump},
	}}}
	notes := strings.Join(f.allNotes(), "\n")
	if !strings.Contains(notes, "JIT symbols /tmp/jit-1.dump: at the index's memory bound, 3 live code ranges were dropped (oldest first) and 5 replaced ones forgotten") {
		t.Errorf("notes:\n%s", notes)
	}
	if strings.Contains(notes, "jit-2.dump") {
		t.Errorf("a file the bound cost nothing has a note:\n%s", notes)
	}
}

// TestBuildIsResolve: the table a resolver builds sample by sample
// (build, SetTable: each memo stack numbered once) writes the files the
// resolved slice of the same samples writes through SetSamples, byte for
// byte, and counts the samples capture.json counts: stacks repeated in
// runs and scattered, several threads, phases and kinds, end times out
// of order, equal (merged) and absent (untimed). The stacks are this
// test's own code, symbolized in this process.
func TestBuildIsResolve(t *testing.T) {
	pcs := []uint64{
		uint64(reflect.ValueOf(TestBuildIsResolve).Pointer()) + 1,
		uint64(reflect.ValueOf(TestNotesJITBound).Pointer()) + 1,
		uint64(reflect.ValueOf(cutNotes).Pointer()) + 1,
		uint64(reflect.ValueOf(grownNote).Pointer()) + 1,
		uint64(reflect.ValueOf(sizeText).Pointer()) + 1,
	}
	stacks := [][]uint64{pcs[:1], pcs[:3], pcs[1:4], {pcs[4], pcs[0], pcs[2]}, pcs, {}}
	r := rand.New(rand.NewPCG(3, 4))
	var before, during []sampler.Sample
	for i := range 3000 {
		s := sampler.Sample{
			Time:   uint64(1_000_000 + r.IntN(400)*1000), // equal times merge
			Weight: uint64(1 + r.IntN(3)*100_000),
			PID:    42,
			TID:    int32(42 + r.IntN(3)),
			Stack:  stacks[r.IntN(len(stacks))],
		}
		if i > 0 && r.IntN(3) == 0 { // a run of the stack before
			s.Stack = before[len(before)-1].Stack
		}
		if r.IntN(4) == 0 {
			s.Kind, s.Preempted = sampler.OffCPU, r.IntN(2) == 0
		}
		before = append(before, s)
	}
	before, during = before[:1000], before[1000:]
	windows := []window{{"before", before}, {"during", during}}
	tp, err := target.Open(os.Getpid(), target.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	toWall := func(mono uint64) int64 {
		if mono%7000 == 0 {
			return 0 // no end time: merged by stack and labels
		}
		return int64(mono) + 1_700_000_000_000_000_000
	}
	names := map[int]string{42: "main", 43: "worker"}
	cfg := Config{Freq: 997}
	write := func(c *report.Capture) map[string][]byte {
		t.Helper()
		if err := analyze(c); err != nil {
			t.Fatal(err)
		}
		files, err := report.CaptureFiles(c)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]byte{}
		for _, f := range files {
			var b bytes.Buffer
			if err := f.Write(&b); err != nil {
				t.Fatal(err)
			}
			out[f.Name] = b.Bytes()
		}
		return out
	}
	meta := func(f *facts) model.Meta {
		info := f.info()
		return f.meta(&info)
	}

	f := &facts{cfg: cfg, sampled: true}
	if err := f.resolve(&resolver{tp: tp, names: names, toWall: toWall}, windows); err != nil {
		t.Fatal(err)
	}
	built := &report.Capture{Info: f.info()}
	if err := built.SetTable(f.table, meta(f)); err != nil {
		t.Fatal(err)
	}

	samples := (&resolver{tp: tp, names: names, toWall: toWall}).resolve(windows)
	var on, off int
	for _, s := range samples {
		if s.OffCPU {
			off++
		} else {
			on++
		}
	}
	if f.onCPU != on || f.offCPU != off {
		t.Errorf("build counted %d on-CPU and %d off-CPU samples, the resolved slice has %d and %d", f.onCPU, f.offCPU, on, off)
	}
	resolved := &report.Capture{Info: f.info()}
	if err := resolved.SetSamples(samples, meta(f)); err != nil {
		t.Fatal(err)
	}

	got, want := write(built), write(resolved)
	if len(got) != len(want) {
		t.Fatalf("%d files, SetSamples' capture %d", len(got), len(want))
	}
	for name, w := range want {
		if !bytes.Equal(got[name], w) {
			t.Errorf("%s differs from SetSamples' (%d and %d bytes)", name, len(got[name]), len(w))
		}
	}
	if n := len(want[capdir.FileProfile]); n < 1000 {
		t.Errorf("profile.pb.gz of %d bytes: too small to hold the samples", n)
	}
}

// TestStackMemo: a stack is found by its addresses, kernel count and cut
// alike, through the table's growth, and only then.
func TestStackMemo(t *testing.T) {
	var m stackMemo
	if e := m.get([]uint64{1}, 0, unwind.Cut{}); e != nil {
		t.Fatalf("an empty memo has %v", e)
	}
	type key struct {
		addrs  []uint64
		kernel int
		cut    unwind.Cut
	}
	keys := []key{
		{nil, 0, unwind.Cut{}},
		{[]uint64{1, 2, 3}, 0, unwind.Cut{}},
		{[]uint64{1, 2, 3}, 1, unwind.Cut{}}, // the same addresses, one of them the kernel's
		{[]uint64{1, 2, 3}, 0, unwind.Cut{Reason: unwind.CopyExhausted}},
		{[]uint64{1, 2}, 0, unwind.Cut{}},
	}
	for i := range 3000 { // past the first table's 1,024 slots, twice
		keys = append(keys, key{[]uint64{uint64(i), 7, uint64(i) * 3}, i % 3, unwind.Cut{}})
	}
	for i, k := range keys {
		loc := []*model.Location{{Addr: uint64(i)}}
		if e := m.put(k.addrs, k.kernel, k.cut, loc); e.locs[0] != loc[0] {
			t.Fatalf("put %d gave %v", i, e)
		}
	}
	for i, k := range keys {
		e := m.get(slices.Clone(k.addrs), k.kernel, k.cut)
		if e == nil || e.locs[0].Addr != uint64(i) {
			t.Errorf("key %d (%v, kernel %d, cut %v): got %v", i, k.addrs, k.kernel, k.cut, e)
		}
		if again := m.get(k.addrs, k.kernel, k.cut); again != e { // the sample before's
			t.Errorf("key %d asked twice: %v then %v", i, e, again)
		}
	}
	for _, k := range []key{{[]uint64{1, 2, 4}, 0, unwind.Cut{}}, {[]uint64{1}, 0, unwind.Cut{}}, {[]uint64{3, 7, 9}, 1, unwind.Cut{}}} {
		if e := m.get(k.addrs, k.kernel, k.cut); e != nil {
			t.Errorf("%v, kernel %d: found %v, never put", k.addrs, k.kernel, e.locs[0].Addr)
		}
	}
}
