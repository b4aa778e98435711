package objfile

import (
	"compress/gzip"
	"debug/gosym"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// layoutText is where the fixtures' .text is linked (testdata/pclntab/make.sh).
const layoutText = 0x401000

// readLayoutFixture is the .gopclntab of testdata/pclntab/main.go.txt
// as toolchain v built it.
func readLayoutFixture(t *testing.T, v string) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "pclntab", v+".gopclntab.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(io.LimitReader(z, maxGoTable))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGoTableLayouts: the pclntab of a real binary of each layout before
// Go 1.20's (1.2–1.15, 1.16–1.17, 1.18–1.19; 1.20 on is the fixture above
// and every Go binary the tests run) reads as the standard library's
// debug/gosym reads it — every function's name and bounds, the file and
// line at its entry, middle and end — and gives the frame sizes the
// source says: main.middle's frame holds its 64-word array, main.leaf's
// holds no more than a return address' worth, and no function has one
// at its entry.
func TestGoTableLayouts(t *testing.T) {
	for _, tc := range []struct {
		toolchain string
		version   int
	}{{"go1.15.15", 12}, {"go1.16.15", 116}, {"go1.19.13", 118}} {
		t.Run(tc.toolchain, func(t *testing.T) {
			data := readLayoutFixture(t, tc.toolchain)
			g, err := ParseGoTable(data, layoutText, tc.toolchain)
			if err != nil || g == nil {
				t.Fatalf("ParseGoTable: %v, %v", g, err)
			}
			if g.version != tc.version {
				t.Errorf("read as layout %d, want %d", g.version, tc.version)
			}
			want, err := gosym.NewTable(nil, gosym.NewLineTable(data, layoutText))
			if err != nil {
				t.Fatalf("debug/gosym: %v", err)
			}
			t.Logf("%d functions", g.Funcs())
			if g.Funcs() != len(want.Funcs) {
				t.Errorf("%d functions, debug/gosym has %d", g.Funcs(), len(want.Funcs))
			}
			for _, fn := range want.Funcs {
				compareFunc(t, g, want, fn)
			}
			checkFrames(t, g)
			if lo, hi := g.FuncRange("runtime.goexit"); hi <= lo || g.FrameKind(lo) != GoOutermost {
				t.Errorf("runtime.goexit at %#x-%#x is not where a walk ends", lo, hi)
			}
		})
	}
}

// compareFunc compares what g says of fn with what debug/gosym says.
func compareFunc(t *testing.T, g *GoTable, want *gosym.Table, fn gosym.Func) {
	t.Helper()
	if lo, hi, ok := g.FuncBounds(fn.Entry); !ok || lo != fn.Entry || hi != fn.End {
		t.Errorf("%s: bounds %#x-%#x (%v), debug/gosym %#x-%#x", fn.Name, lo, hi, ok, fn.Entry, fn.End)
		return
	}
	for _, pc := range []uint64{fn.Entry, fn.Entry + (fn.End-fn.Entry)/2, fn.End - 1} {
		name, file, line, ok := g.Line(pc)
		wfile, wline, wfn := want.PCToLine(pc)
		if wfn == nil {
			continue
		}
		if wline < 0 {
			wline = 0 // no line here (a function's padding): Line says 0
		}
		if !ok || name != wfn.Name || file != wfile || line != int64(wline) {
			t.Errorf("%#x: %s %s:%d (%v), debug/gosym %s %s:%d", pc, name, file, line, ok, wfn.Name, wfile, wline)
		}
	}
}

// checkFrames checks the frame sizes main.go.txt's source says.
func checkFrames(t *testing.T, g *GoTable) {
	t.Helper()
	for _, tc := range []struct {
		fn       string
		min, max uint64
	}{{"main.middle", 64 * 8, 64*8 + 256}, {"main.leaf", 0, 8}} {
		lo, hi := g.FuncRange(tc.fn)
		if hi <= lo {
			t.Errorf("no %s", tc.fn)
			continue
		}
		if d, ok := g.SPDelta(lo); !ok || d != 0 {
			t.Errorf("%s at its entry: SP %d below (%v), want 0", tc.fn, d, ok)
		}
		var most uint64
		for pc := lo; pc < hi; pc++ {
			if d, ok := g.SPDelta(pc); ok {
				most = max(most, d)
			}
		}
		if most < tc.min || most > tc.max {
			t.Errorf("%s's frame is %d bytes at most, want %d to %d", tc.fn, most, tc.min, tc.max)
		}
	}
	if _, _, _, ok := g.Line(layoutText - 1); ok {
		t.Error("a pc below .text has a line")
	}
}
