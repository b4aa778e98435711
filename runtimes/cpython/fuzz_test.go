package cpython

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// Every decoder of target memory is fuzzed: line tables, str objects,
// _Py_DebugOffsets, and whole walks (threads, frames, code objects) over
// images laid out as each version would, then mutated. Each asserts what
// the reader guarantees: no panic, bounded work (reads) and allocation,
// bounded and valid output.

var writeCorpus = flag.Bool("cpython.write-corpus", false, "write the fuzz targets' seed corpora to testdata/fuzz")

// seed adds a seed to f and, with -cpython.write-corpus, writes it to
// testdata/fuzz/<target>/ in the fuzzing engine's format.
func seed(f *testing.F, name string, args ...any) {
	f.Add(args...)
	if !*writeCorpus {
		return
	}
	dir := filepath.Join("testdata", "fuzz", f.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	text := "go test fuzz v1\n"
	for _, a := range args {
		switch v := a.(type) {
		case []byte:
			text += fmt.Sprintf("[]byte(%q)\n", v)
		case uint8:
			text += fmt.Sprintf("byte(%d)\n", v)
		case int:
			text += fmt.Sprintf("int(%d)\n", v)
		case uint32:
			text += fmt.Sprintf("uint32(%d)\n", v)
		default:
			f.Fatalf("seed of type %T", a)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		f.Fatal(err)
	}
}

func FuzzLineTable(f *testing.F) {
	for _, minor := range minors {
		b := newFakeBuilder(minor)
		seed(f, fmt.Sprintf("fake-3.%d", minor), uint8(b.l.LineTable), b.lineTable(3), 10, 4)
	}
	// Real tables (testdata/gaps.py's far_apart as 3.8, 3.10 and 3.11
	// compile it): long forms, multi-byte varints.
	seed(f, "lnotab-far", uint8(LineTableLnotab), []byte{0, 1, 4, 127, 0, 33, 4, 1}, 8, 6)
	seed(f, "linetable310-far", uint8(LineTable310), []byte{4, 1, 0, 127, 4, 33, 4, 1, 6, 128}, 8, 14)
	seed(f, "locations-long", uint8(LineTableLocations), []byte{0x80, 0x00, 0xf0, 0xc2, 0x02, 0x00, 0x05, 0x09, 0xf8, 0xe8, 0x82, 0x01, 0x00, 0x01, 0x01}, 8, 4)
	f.Fuzz(func(t *testing.T, format uint8, table []byte, first, addr int) {
		if len(table) > maxLineTable {
			return
		}
		fm := LineTableFormat(format%3 + 1)
		line, ok := addr2line(fm, table, first, addr)
		again, ok2 := addr2line(fm, table, first, addr)
		if line != again || ok != ok2 {
			t.Fatalf("not deterministic: %d %v, then %d %v", line, ok, again, ok2)
		}
		if addr < 0 && (line != first || !ok) {
			t.Fatalf("before the first instruction: %d %v, want the first line %d", line, ok, first)
		}
		// A byte pair moves the line by at most 128.
		if ok && addr >= 0 && fm != LineTableLocations {
			if d := int64(line) - int64(first); d > 128*int64(len(table)) || d < -128*int64(len(table)) {
				t.Fatalf("line %d from first %d with a %d-byte table", line, first, len(table))
			}
		}
	})
}

func FuzzStr(f *testing.F) {
	for _, minor := range minors {
		for i, s := range []string{"spin", "café", "函数", "𝔣"} {
			b := newFakeBuilder(minor)
			a := b.str(s)
			seed(f, fmt.Sprintf("3.%d-%d", minor, i), uint8(minor), uint32(a-fakeBase), b.b)
		}
	}
	f.Fuzz(func(t *testing.T, minor uint8, off uint32, image []byte) {
		l, ok := layouts[int(minor)]
		if !ok || len(image) > 1<<20 {
			return
		}
		b := &fakeBuilder{l: l, minor: int(minor), b: append([]byte(nil), image...)}
		rt, mem := b.open(0, Options{})
		rt.types = typeAddrs{} // the tp_name path too
		rt.r.reset(64)
		var s string
		n := testutil.HeapBytes(func() { s, _ = rt.str("str", fakeBase+uint64(off), maxName) })
		if !utf8.ValidString(s) {
			t.Fatalf("%q is not UTF-8", s)
		}
		if utf8.RuneCountInString(s) > maxName+1 {
			t.Fatalf("%d characters, bound %d", utf8.RuneCountInString(s), maxName)
		}
		if mem.reads > 64 {
			t.Fatalf("%d reads", mem.reads)
		}
		if n > 1<<20 {
			t.Fatalf("reading one name allocated %d bytes", n)
		}
	})
}

func FuzzDebugOffsets(f *testing.F) {
	// The header as 3.13.0 publishes it: the offsets in its table.
	b := make([]byte, debugOffsetsSize313)
	copy(b, debugCookie)
	l := layouts[13]
	put := func(i int, v int64) { binary.LittleEndian.PutUint64(b[i*8:], uint64(v)) }
	put(1, 0x030d00f0)
	put(3, 283320)
	put(doRuntimeInterpretersHead, l.RuntimeInterpretersHead)
	put(doInterp, 8192)
	put(doInterpID, l.InterpID)
	put(doInterpNext, l.InterpNext)
	put(doInterpThreadsHead, l.InterpThreadsHead)
	put(doInterpCevalGIL, l.InterpGIL)
	put(doThread, 304)
	put(doThreadFrame, l.ThreadFrame)
	put(doFrame, 80)
	put(doCode, 208)
	seed(f, "3.13.0", b)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, _, err := applyDebugOffsets(layouts[13], b)
		if err != nil {
			return
		}
		for name, v := range map[string]int64{
			"interp.threads_head": got.InterpThreadsHead, "thread.frame": got.ThreadFrame,
			"frame.owner": got.FrameOwner, "code.name": got.CodeName, "frame size": got.FrameSize, "code size": got.CodeSize,
		} {
			if v < -1 || v > maxStruct {
				t.Fatalf("%s = %d", name, v)
			}
		}
	})
}

// walkBudget is what one Dump may read at most with Options{MaxDepth:
// 64, MaxThreads: 64}: the lists, then each thread's walk.
const walkBudget = 16 + maxInterpreters*2 + 64*threadReads + 64*(16+64*frameReads)

func FuzzWalk(f *testing.F) {
	for _, minor := range minors {
		b, addr, _ := standardImage(minor)
		seed(f, fmt.Sprintf("standard-3.%d", minor), uint8(minor), uint32(addr-fakeBase), b.b)
		// One thread whose innermost frame points back to itself.
		b, addr, states := standardImage(minor)
		fr := innermost(b, states[0])
		b.put64(fr+uint64(b.l.FrameBack), fr)
		seed(f, fmt.Sprintf("cycle-3.%d", minor), uint8(minor), uint32(addr-fakeBase), b.b)
	}
	f.Fuzz(func(t *testing.T, minor uint8, off uint32, image []byte) {
		if _, ok := layouts[int(minor)]; !ok || len(image) > 1<<20 {
			return
		}
		b := newFakeBuilder(int(minor)) // for its type objects' addresses
		b.b = append([]byte(nil), image...)
		rt, mem := b.open(fakeBase+uint64(off), Options{MaxDepth: 64, MaxThreads: 64})
		var d *Dump
		n := testutil.HeapBytes(func() { d, _ = rt.Dump() })
		if mem.reads > walkBudget {
			t.Fatalf("%d reads, budget %d", mem.reads, walkBudget)
		}
		if n > uint64(len(image))*64+2*maxWalkBytes+(8<<20) {
			t.Fatalf("a Dump of a %d-byte image allocated %d bytes", len(image), n)
		}
		if len(d.Threads) > 64 {
			t.Fatalf("%d threads, bound 64", len(d.Threads))
		}
		for _, th := range d.Threads {
			if len(th.Frames) > 64 {
				t.Fatalf("%d frames, bound 64", len(th.Frames))
			}
			for _, fr := range th.Frames {
				if !utf8.ValidString(fr.Function) || !utf8.ValidString(fr.File) || len(fr.Function) > 4*maxName+3 || len(fr.File) > 4*maxPath+3 {
					t.Fatalf("frame %q %q", fr.Function, fr.File)
				}
			}
		}
	})
}
