package v8

import (
	"errors"
	"strings"
	"testing"
)

func testLayout(t testing.TB) *Layout {
	t.Helper()
	l, err := NewLayout(node20(), testBytecodeSizes())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testBytecodeSizes is a table of 8 bytecodes: 0-3 the scaling prefixes,
// 4 of 1 byte, 5 of 2, 6 of 3, 7 of 5 at single scale (twice and four
// times the operands at the wider scales).
func testBytecodeSizes() []byte {
	return []byte{
		1, 1, 1, 1, 1, 2, 3, 5,
		1, 1, 1, 1, 1, 3, 5, 9,
		1, 1, 1, 1, 1, 5, 9, 17,
	}
}

func TestNewLayout(t *testing.T) {
	l := testLayout(t)
	if l.Version != (Version{11, 3, 244, 8}) || l.code == nil || l.smiShift != 32 || l.offBytecodeSPT != 32 {
		t.Fatalf("Node.js 20's layout: %+v (code layout error %v)", l, l.codeErr)
	}
	for _, tc := range []struct {
		name   string
		change func(Constants)
		want   string
	}{
		{"missing symbol", func(c Constants) { delete(c, "v8dbg_off_fp_function") }, "no postmortem symbol v8dbg_off_fp_function"},
		{"pointer compression", func(c Constants) { c["v8dbg_TaggedSize"] = 4 }, "tagged values of 4 bytes"},
		{"other tagging", func(c Constants) { c["v8dbg_HeapObjectTag"] = 3 }, "tagging scheme"},
		{"no symbols at all", func(c Constants) { clear(c) }, "V8 of unknown version: no postmortem symbol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := node20()
			tc.change(c)
			_, err := NewLayout(c, nil)
			var le *LayoutError
			if !errors.As(err, &le) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a *LayoutError saying %q", err, tc.want)
			}
		})
	}
	// A V8 whose Code layout the reader does not know names optimized
	// frames without reading their code.
	c := node20()
	c[versionMajor], c[versionMinor] = 12, 4
	l, err := NewLayout(c, nil)
	if err != nil || l.code != nil || l.codeErr == nil || !strings.Contains(l.codeErr.Error(), "12.4.244.8") {
		t.Fatalf("V8 12.4: %v, code layout %v (%v)", err, l.code, l.codeErr)
	}
}

func TestStrings(t *testing.T) {
	l := testLayout(t)
	f := newFakeHeap(l)
	long := strings.Repeat("x", maxNameBytes+100)
	hello := f.str("hello, world")
	self := f.cons(0, 0, 10)
	selfObj, _ := l.object(self)
	f.put64(selfObj+16, self) // a cons string made of itself
	for _, tc := range []struct {
		name string
		v    uint64
		want string
		err  error
	}{
		{"one byte", f.str("waitForLock"), "waitForLock", nil},
		{"latin-1", f.str("caf\xe9"), "café", nil},
		{"two byte", f.twoByte("héllo ☃ 𝄞"), "héllo ☃ 𝄞", nil},
		{"cons", f.cons(f.str("Module."), f.cons(f.str("_com"), f.twoByte("pile"), 8), 15), "Module._compile", nil},
		{"thin", f.thin(f.str("actual"), 6), "actual", nil},
		{"sliced", f.sliced(hello, 7, 5), "world", nil},
		{"external", f.external("node:internal/timers"), "node:internal/timers", nil},
		{"cut at the bound", f.str(long), long[:maxNameBytes], nil},
		{"cons of itself", self, "", ErrBudget},
		{"not a string", f.oddball(), "", nil},
		{"Smi", smi(3), "", nil},
		{"past the heap", 0x7fff_0000_0001, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(l, f)
			got, err := r.h.str(tc.v, maxNameBytes)
			switch {
			case tc.want != "" && (err != nil || got != tc.want):
				t.Fatalf("%q, %v; want %q", got, err, tc.want)
			case tc.want == "" && err == nil:
				t.Fatalf("%q, want an error", got)
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Fatalf("error %v, want %v", err, tc.err)
			}
		})
	}
}

func TestFunctionNames(t *testing.T) {
	l := testLayout(t)
	f := newFakeHeap(l)
	undefined := f.oddball()
	for _, tc := range []struct {
		name        string
		nameOrScope uint64
		want        string
	}{
		{"its name", f.str("handleRequest"), "handleRequest"},
		{"no shared name", smi(0), ""},
		{"scope info", f.scopeInfo(0, f.str("listOnTimeout"), undefined), "listOnTimeout"},
		{"scope info with locals", f.scopeInfo(3, f.str("processTimers"), undefined), "processTimers"},
		{"inferred name", f.scopeInfo(2, smi(0), f.str("Module._compile")), "Module._compile"},
		{"empty name, inferred name", f.scopeInfo(0, f.str(""), f.cons(f.str("Module."), f.str("_compile"), 15)), "Module._compile"},
		{"locals in a hash table", f.scopeInfo(80, f.str("big"), undefined), "big"},
		{"anonymous", f.scopeInfo(1, smi(0), undefined), ""},
		// The outer scope's ScopeInfo ends the parts read; past the last
		// part lies another object (a word that looks tagged and points
		// nowhere), never read as a name.
		{"anonymous, an outer scope, then another object", f.scopeInfo(0, f.str(""), undefined, f.scopeInfo(0, f.str("outer"), undefined), 0x39, f.str("local")), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(l, f)
			fn, err := r.sfi(f.sfi(tc.nameOrScope, undefined))
			if err != nil || fn.name != tc.want {
				t.Fatalf("%+v, %v; want %q", fn, err, tc.want)
			}
		})
	}
	r := NewReader(l, f)
	if _, err := r.sfi(f.oddball()); !isTypeError(err) {
		t.Errorf("an Oddball as a SharedFunctionInfo: %v, want a *TypeError", err)
	}
}

func isTypeError(err error) bool {
	var te *TypeError
	return errors.As(err, &te)
}

func TestPositionTable(t *testing.T) {
	table := positions([2]int64{0, pos(10, -1)}, [2]int64{5, pos(20, -1)}, [2]int64{9, pos(40, 0)})
	for _, tc := range []struct {
		off  int64
		want sourcePosition
	}{
		{0, sourcePosition(pos(10, -1))}, {4, sourcePosition(pos(10, -1))},
		{5, sourcePosition(pos(20, -1))}, {100, sourcePosition(pos(40, 0))},
	} {
		got, err := positionAt(table, tc.off)
		if err != nil || got != tc.want {
			t.Errorf("offset %d: %#x, %v; want %#x", tc.off, got, err, tc.want)
		}
	}
	if p := sourcePosition(pos(40, 0)); p.scriptOffset() != 40 || p.inliningID() != 0 || p.external() {
		t.Errorf("position %#x: offset %d inlined at %d", p, p.scriptOffset(), p.inliningID())
	}
	if _, err := positionAt(table[:len(table)-1], 100); !errors.Is(err, errTruncated) {
		t.Errorf("truncated table: %v", err)
	}
	if _, err := positionAt(table, -2); err == nil {
		t.Error("an offset before the first entry has a position")
	}
	// Entries with an external position (a line of another file) are not
	// JavaScript: the entry before counts.
	ext := positions([2]int64{0, pos(10, -1)}, [2]int64{3, pos(0, -1) | 1})
	if got, _ := positionAt(ext, 5); got.scriptOffset() != 10 {
		t.Errorf("external entry taken: offset %d", got.scriptOffset())
	}
}

func TestScriptPositions(t *testing.T) {
	l := testLayout(t)
	f := newFakeHeap(l)
	src := "a\nbc\r\nd\re\u2028f"
	for _, tc := range []struct {
		name      string
		script    uint64
		offset    int64
		line, col int
	}{
		{"first line", f.script(f.str("x.js"), f.str(src), nil, 0), 0, 1, 1},
		{"after \\n", f.script(f.str("x.js"), f.str(src), nil, 0), 3, 2, 2},
		{"\\r\\n is one end", f.script(f.str("x.js"), f.str(src), nil, 0), 6, 3, 1},
		{"\\r alone", f.script(f.str("x.js"), f.str(src), nil, 0), 8, 4, 1},
		{"U+2028 in two-byte source", f.script(f.str("x.js"), f.twoByte(src), nil, 0), 10, 5, 1},
		{"V8's table", f.script(f.str("x.js"), f.oddball(), []int64{1, 5, 7, 20}, 0), 6, 3, 1},
		{"line offset", f.script(f.str("x.js"), f.str(src), nil, 10), 3, 12, 2},
		{"source in pieces", f.script(f.str("x.js"), f.cons(f.str("a\nb"), f.str("c\r\nd"), 7), nil, 0), 6, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(l, f)
			s := r.scriptOf(tc.script)
			if s == nil || s.name != "x.js" {
				t.Fatalf("script %+v", s)
			}
			line, col, err := r.position(s, tc.offset)
			if err != nil || line != tc.line || col != tc.col {
				t.Fatalf("offset %d: line %d column %d, %v; want %d:%d", tc.offset, line, col, err, tc.line, tc.col)
			}
		})
	}
	r := NewReader(l, f)
	s := r.scriptOf(f.script(f.str("x.js"), f.str("ab"), nil, 0))
	if _, _, err := r.position(s, 50); err == nil {
		t.Error("an offset past the source has a line")
	}
}

// interpretedFrame makes the frame of an interpreted function f of a
// script whose source is src, at the bytecode whose position is offset.
func interpretedFrame(f *fakeHeap, name, src string, offset int64, spt bool) uint64 {
	script := f.script(f.str("/app/x.js"), f.str(src), nil, 0)
	fn, _ := f.function(2066, f.sfi(f.scopeInfo(1, f.str(name), f.oddball()), script))
	var table []byte
	if spt {
		table = positions([2]int64{0, pos(0, -1)}, [2]int64{4, pos(offset, -1)})
	}
	bytecode := f.bytecodeArray(make([]byte, 16), table)
	context := f.context()
	// Ignition keeps the offset from the tagged BytecodeArray pointer.
	return f.frame(context, fn, bytecode, smi(4+54-1))
}

func TestFrame(t *testing.T) {
	l := testLayout(t)
	f := newFakeHeap(l)
	src := "function spin() {\n  for (;;) work();\n}\n"
	interpreted := interpretedFrame(f, "spin", src, int64(strings.Index(src, "work")), true)
	lazy := interpretedFrame(f, "spin", src, 0, false)
	classFn, _ := f.function(2066+15, f.sfi(f.str("Server"), f.oddball()))
	builtin := f.frame(f.context(), classFn, smi(0), smi(0))
	notFunction := f.frame(f.context(), f.str("x"), 0, 0)
	noContext := f.frame(f.fixedArray(175, nil), classFn, smi(0), smi(0))
	for _, tc := range []struct {
		name string
		at   At
		want Frame
		err  error
	}{
		{"interpreted", At{FP: interpreted, Return: true}, Frame{Kind: Interpreted, Functions: []Function{{"spin", "/app/x.js", 2, 12}}}, nil},
		{"lazy source positions", At{FP: lazy}, Frame{Kind: Interpreted, Functions: []Function{{Name: "spin", Script: "/app/x.js"}}, LineErr: errLazyPositions}, nil},
		{"builtin, a class constructor", At{FP: builtin, Code: CodeBuiltins}, Frame{Kind: Builtin, Functions: []Function{{Name: "Server"}}, LineErr: errBuiltin}, nil},
		// C++ keeps V8's objects in its frames: in a binary whose
		// builtins cannot be told from its C++, only an interpreted
		// frame is believed.
		{"V8's C++, or a builtin", At{FP: builtin}, Frame{}, ErrNotFrame},
		{"no context", At{FP: noContext, Code: CodeBuiltins}, Frame{}, ErrNotFrame},
		{"entry frame", At{FP: f.frame(1<<1, 0, 0, 0)}, Frame{Kind: Typed, Type: "EntryFrame"}, nil},
		{"exit frame", At{FP: f.frame(3<<1, 0, 0, 0)}, Frame{Kind: Typed, Type: "ExitFrame"}, nil},
		{"unknown marker", At{FP: f.frame(200<<1, 0, 0, 0)}, Frame{}, ErrNotFrame},
		{"not a function", At{FP: notFunction}, Frame{}, ErrNotFrame},
		{"unreadable", At{FP: 0x40}, Frame{}, ErrNotFrame},
		{"below the slots", At{FP: 8}, Frame{}, ErrNotFrame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(l, f)
			got, err := r.Frame(tc.at)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("%+v, %v; want %v", got, err, tc.err)
				}
				return
			}
			if err != nil || !sameFrame(got, tc.want) {
				t.Fatalf("%+v, %v\nwant %+v", got, err, tc.want)
			}
		})
	}
}

func sameFrame(a, b Frame) bool {
	if a.Kind != b.Kind || a.Type != b.Type || len(a.Functions) != len(b.Functions) || !errors.Is(a.LineErr, b.LineErr) {
		return false
	}
	for i := range a.Functions {
		if a.Functions[i] != b.Functions[i] {
			return false
		}
	}
	return true
}

// optimizedHeap makes a Turbofan Code for outer, which inlined mid, which
// inlined inner, and a frame of outer running it.
func optimizedHeap(l *Layout, codeIsFunctions bool) (f *fakeHeap, fp, start uint64) {
	f = newFakeHeap(l)
	src := "function inner() { return work(); }\nfunction mid() { return inner(); }\nfunction outer() { mid(); }\n"
	script := f.script(f.str("/app/o.js"), f.str(src), nil, 0)
	sfi := func(name string) uint64 { return f.sfi(f.scopeInfo(0, f.str(name), f.oddball()), script) }
	outer, mid, inner := sfi("outer"), sfi("mid"), sfi("inner")
	// Inlining 0: mid, called from outer's body; 1: inner, from mid's.
	inlining := make([]byte, 32)
	putPos := func(i int, p int64, lit int32) {
		for k := range 8 {
			inlining[16*i+k] = byte(p >> (8 * k))
		}
		for k := range 4 {
			inlining[16*i+8+k] = byte(lit >> (8 * k))
		}
	}
	putPos(0, pos(int64(strings.Index(src, "mid();")), -1), 0)
	putPos(1, pos(int64(strings.Index(src, "inner();")), 0), 1)
	literals := f.fixedArray(240, []uint64{mid, inner | 2}) // inner as a weak reference
	deopt := f.fixedArray(175, []uint64{0, smi(2), literals, 0, 0, 0, outer, f.byteArray(inlining)})
	spt := positions([2]int64{0, pos(int64(strings.Index(src, "mid();")), -1)},
		[2]int64{0x20, pos(int64(strings.Index(src, "work")), 1)})
	code, start := f.code(13, 0x100, spt, deopt)
	fnV, fnA := f.function(2066, outer)
	if codeIsFunctions {
		f.put64(fnA+48, code)
	} else {
		f.put64(fnA+48, f.oddball()) // on-stack replaced: the function's code is another
	}
	return f, f.frame(f.context(), fnV, 0, 0), start
}

func TestFrameOptimized(t *testing.T) {
	l := testLayout(t)
	want := []Function{{"inner", "/app/o.js", 1, 27}, {"mid", "/app/o.js", 2, 25}, {"outer", "/app/o.js", 3, 20}}
	for _, viaFunction := range []bool{true, false} {
		f, fp, start := optimizedHeap(l, viaFunction)
		r := NewReader(l, f)
		got, err := r.Frame(At{FP: fp, PC: start + 0x31, Return: true, Code: CodeJIT})
		if err != nil || got.Kind != Optimized || got.LineErr != nil || !sameFrame(got, Frame{Kind: Optimized, Functions: want}) {
			t.Errorf("code found through the function %v: %+v, %v\nwant %+v", viaFunction, got, err, want)
		}
		got, err = r.Frame(At{FP: fp, PC: start + 0x10, Return: true, Code: CodeJIT})
		if err != nil || !sameFrame(got, Frame{Kind: Optimized, Functions: want[2:]}) {
			t.Errorf("outside the inlined code: %+v, %v", got, err)
		}
		// A pc past the Code's instructions is no pc of it: the frame
		// keeps the function its slot names.
		got, err = r.Frame(At{FP: fp, PC: start + 0x200, Return: true, Code: CodeJIT})
		if err != nil || len(got.Functions) != 1 || got.Functions[0].Name != "outer" || !errors.Is(got.LineErr, errNoCode) {
			t.Errorf("pc past its code: %+v, %v", got, err)
		}
	}
}

func TestFrameBaseline(t *testing.T) {
	l := testLayout(t)
	f := newFakeHeap(l)
	src := "function b() {\n  x();\n  y();\n}\n"
	script := f.script(f.str("/app/b.js"), f.str(src), nil, 0)
	sfi := f.sfi(f.str("b"), script)
	// Bytecodes: 4 (1 byte) at 0, 6 (3 bytes) at 1, Wide+5 (1+3) at 4, 7
	// (5 bytes) at 8. Their code: the prologue 0x10 bytes, then 8, 12, 4
	// and 20 bytes.
	bytecodes := []byte{4, 6, 0, 0, 0, 5, 0, 0, 7, 0, 0, 0, 0}
	spt := positions([2]int64{1, pos(int64(strings.Index(src, "x()")), -1)}, [2]int64{8, pos(int64(strings.Index(src, "y()")), -1)})
	bytecode := f.bytecodeArray(bytecodes, spt)
	var table []byte
	for _, n := range []uint64{0x10, 8, 12, 4, 20} {
		table = appendUVLQ(table, n)
	}
	code, start := f.code(11, 0x40, nil, 0)
	codeObj, _ := l.object(code)
	f.put64(codeObj+24, f.byteArray(table))
	fnV, fnA := f.function(2066, sfi)
	f.put64(fnA+48, code)
	fp := f.frame(f.context(), fnV, bytecode, f.fixedArray(typeFeedback, nil))
	for _, tc := range []struct {
		pcOff     uint64
		line, col int
	}{
		{0x10 + 8 + 1, 2, 3},          // in the code of the bytecode at 1: x()
		{0x10 + 8 + 12 + 4 + 1, 3, 3}, // in the code of the bytecode at 8: y()
	} {
		r := NewReader(l, f)
		got, err := r.Frame(At{FP: fp, PC: start + tc.pcOff, Return: true, Code: CodeJIT})
		want := Frame{Kind: Baseline, Functions: []Function{{"b", "/app/b.js", tc.line, tc.col}}}
		if err != nil || !sameFrame(got, want) {
			t.Errorf("pc offset %#x: %+v, %v; want %+v", tc.pcOff, got, err, want)
		}
	}
	// Without the binary's table of bytecode sizes, the frame is named.
	noSizes, _ := NewLayout(node20(), nil)
	got, err := NewReader(noSizes, f).Frame(At{FP: fp, PC: start + 0x19, Return: true, Code: CodeJIT})
	if err != nil || got.Kind != Baseline || got.Functions[0].Name != "b" || !errors.Is(got.LineErr, errNoBytecodeSizes) {
		t.Errorf("no bytecode sizes: %+v, %v", got, err)
	}
}

// countingMemory counts the reads of a question.
type countingMemory struct {
	Memory
	reads, bytes int
}

func (c *countingMemory) ReadAt(p []byte, addr uint64) (int, error) {
	c.reads++
	c.bytes += len(p)
	return c.Memory.ReadAt(p, addr)
}

func TestBounded(t *testing.T) {
	l := testLayout(t)
	f := newFakeHeap(l)
	// A chain of cons strings deeper than the bound, as the name of a
	// function: the read stops at the depth bound.
	s := f.str("x")
	for i := range maxStringDepth * 2 {
		s = f.cons(s, f.str("y"), i+2)
	}
	fn, _ := f.function(2066, f.sfi(s, f.oddball()))
	fp := f.frame(f.context(), fn, 0, 0)
	mem := &countingMemory{Memory: f}
	_, err := NewReader(l, mem).Frame(At{FP: fp, Code: CodeBuiltins})
	if !errors.Is(err, ErrBudget) {
		t.Errorf("a name nested %d deep: %v, want ErrBudget", maxStringDepth*2, err)
	}
	if mem.reads > maxReads || mem.bytes > maxReadBytes {
		t.Errorf("%d reads of %d bytes, bound %d and %d", mem.reads, mem.bytes, maxReads, maxReadBytes)
	}
}
