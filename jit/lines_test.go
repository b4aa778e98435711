package jit

import "testing"

func TestLineTables(t *testing.T) {
	w := newDumpWriter(false, hdrOpts{})
	// LLVM's and V8's convention: addresses are code_addr + 0x40 + offset.
	w.debug(1, 0x1000,
		dbgEntry{0x1000 + 0x40 + 0x10, 7, 0, "/app/a.jl"},
		dbgEntry{0x1000 + 0x40, 5, 0, "/app/a.jl"},
		dbgEntry{0x1000 + 0x40 + 0x20, 20, 0, "/app/inlined.jl"},
		dbgEntry{0x1000 + 0x40 + 0x30, 8, 0, "/app/a.jl"},
		dbgEntry{0x1000 + 0x40 + 0x5000, 99, 0, "\xff"}) // past the code: dropped
	w.load(2, 0x1000, 0x100, 1, "julia_f_1")
	// A writer that does not add 0x40.
	w.debug(3, 0x2000, dbgEntry{0x2000, 3, 0, "/app/b.jl"}, dbgEntry{0x2008, 4, 0, "\xff"})
	w.load(4, 0x2000, 0x10, 2, "julia_g_2")
	w.load(5, 0x3000, 0x10, 3, "julia_h_3") // no debug info
	w.debug(6, 0x4000, dbgEntry{0x4000 + 0x40, 30, 0, "/app/m.jl"}, dbgEntry{0x4000 + 0x48, 31, 0, "\xff"})
	w.load(7, 0x4000, 0x10, 4, "julia_m_4")
	w.move(8, 0x4000, 0x9000, 0x10, 4)
	p := writeFile(t, "jit-1.dump", w.bytes())

	ix, _, err := ReadFile(p, Options{LineTables: true})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := ix.Lookup(0x1000)
	for _, c := range []struct {
		addr uint64
		file string
		line int
	}{
		{0x1000, "/app/a.jl", 5},
		{0x100f, "/app/a.jl", 5},
		{0x1010, "/app/a.jl", 7},
		{0x1025, "/app/inlined.jl", 20},
		{0x10ff, "/app/a.jl", 8},
	} {
		file, line, ok := ix.LineAt(f, c.addr)
		if !ok || file != c.file || line != c.line {
			t.Errorf("LineAt(f, %#x) = %s:%d %v, want %s:%d", c.addr, file, line, ok, c.file, c.line)
		}
	}
	if _, _, ok := ix.LineAt(f, 0x1100); ok {
		t.Error("LineAt past the code answered")
	}
	g, _ := ix.Lookup(0x2000)
	if file, line, ok := ix.LineAt(g, 0x2009); !ok || file != "/app/b.jl" || line != 4 {
		t.Errorf("without the 0x40: LineAt = %s:%d %v", file, line, ok)
	}
	h, _ := ix.Lookup(0x3000)
	if _, _, ok := ix.LineAt(h, 0x3000); ok {
		t.Error("a symbol without debug info has lines")
	}

	if m, ok := ix.Lookup(0x9008); !ok {
		t.Error("moved code not found")
	} else if file, line, ok := ix.LineAt(m, 0x9008); !ok || file != "/app/m.jl" || line != 31 {
		t.Errorf("LineAt in moved code = %s:%d %v, want /app/m.jl:31", file, line, ok)
	}

	// Without the option, and for a symbol of another index: nothing.
	plain, _, _ := ReadFile(p, Options{})
	pf, _ := plain.Lookup(0x1000)
	if _, _, ok := plain.LineAt(pf, 0x1010); ok {
		t.Error("line tables kept without Options.LineTables")
	}
	if _, _, ok := ix.LineAt(pf, 0x1010); ok {
		t.Error("LineAt answered for a symbol of another index")
	}
	copied := *f
	if _, _, ok := ix.LineAt(&copied, 0x1010); ok {
		t.Error("LineAt answered for a copy")
	}
}

// A real Node.js jitdump: where a line table exists, its first line is
// the symbol's line.
func TestLineTablesNode(t *testing.T) {
	tg := startNode(t, "fib.js", "--perf-prof")
	p, err := OpenProcess(tg.Pid, Options{LineTables: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ix := p.Index()
	n := 0
	for s := range ix.All() {
		file, line, ok := ix.LineAt(s, s.Start)
		if !ok {
			continue
		}
		n++
		if file != s.File || line != s.Line {
			t.Errorf("%s: LineAt(start) = %s:%d, symbol says %s:%d", s.Name, file, line, s.File, s.Line)
		}
	}
	if n == 0 {
		t.Errorf("no line tables in %v", p.Sources())
	}
}
