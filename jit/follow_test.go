package jit

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
)

// followFiles is a Process made of given files, without discovery.
func followFiles(t *testing.T, kind SourceKind, paths ...string) *Process {
	t.Helper()
	p := &Process{files: true, b: &builder{}, refused: map[string]*SourceInfo{}, looked: map[string]bool{}}
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		s, err := newSource(f, kind, path, "test")
		if err != nil {
			t.Fatal(err)
		}
		s.reopen = func() (*os.File, error) { return os.Open(path) }
		p.sources = append(p.sources, s)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func sampleDump() []byte {
	w := newDumpWriter(false, hdrOpts{extra: 8})
	for i := range uint64(12) {
		w.unwinding(i*10, []byte{1, 2, 3}, []byte{4, 5, 6, 7})
		w.debug(i*10+1, 0x1000*(i+1), dbgEntry{0x1000*(i+1) + debugAddrBias, int32(i + 1), 0, "/app/f.js"})
		w.load(i*10+2, 0x1000*(i+1), 0x20+i, i, "JS:*f"+string(rune('a'+i))+" /app/f.js:1:1")
	}
	w.move(500, 0x1000, 0x100000, 0x20, 0)
	w.close(600)
	return w.bytes()
}

// A file written in pieces — cut in the header, in a record prefix, in a
// name, in code bytes — reads the same as the whole file, and an
// incomplete last record is never an error.
func TestFollowGrowingJitdump(t *testing.T) {
	full := sampleDump()
	wantIx, _ := readBytes(t, "jit-1.dump", full)
	want := names(wantIx)
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 1))
		path := filepath.Join(t.TempDir(), "jit-1.dump")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		p := followFiles(t, KindJitdump, path)
		for off := 0; off < len(full); {
			n := 1 + rng.IntN(60)
			if seed == 0 {
				n = 1 // every cut
			}
			n = min(n, len(full)-off)
			if _, err := f.Write(full[off : off+n]); err != nil {
				t.Fatal(err)
			}
			off += n
			if err := p.Update(); err != nil {
				t.Fatalf("seed %d, %d bytes: %v", seed, off, err)
			}
			info := p.Sources()[0]
			if info.Bad != 0 || info.Broken != nil {
				t.Fatalf("seed %d, %d bytes: %+v", seed, off, info)
			}
			if off < len(full) && info.Truncated == nil && info.Bytes != int64(off) {
				t.Fatalf("seed %d: %d bytes written, %d read, but nothing reported incomplete", seed, off, info.Bytes)
			}
		}
		f.Close()
		got := names(p.Index())
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: followed %q, whole file %q", seed, got, want)
		}
		if s, ok := p.Index().Lookup(0x100005); !ok || s.Display != "fa" || s.File != "/app/f.js" || s.Line != 1 {
			t.Fatalf("seed %d: moved symbol = %+v", seed, s)
		}
		if info := p.Sources()[0]; info.Truncated != nil || info.Bytes != int64(len(full)) {
			t.Fatalf("seed %d: at the end %+v", seed, info)
		}
	}
}

// Update hands out a new Index; the old one keeps its answers.
func TestFollowKeepsOldIndexes(t *testing.T) {
	full := sampleDump()
	path := writeFile(t, "jit-1.dump", full[:200])
	p := followFiles(t, KindJitdump, path)
	if err := p.Update(); err != nil {
		t.Fatal(err)
	}
	old := p.Index()
	n := old.Len()
	if err := os.WriteFile(path, full, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Update(); err != nil {
		t.Fatal(err)
	}
	if old.Len() != n || p.Index().Len() <= n {
		t.Errorf("old index has %d symbols (was %d), new %d", old.Len(), n, p.Index().Len())
	}
	if a, b := p.Index(), p.Index(); a != b {
		t.Error("Index without changes is not the same Index")
	}
}

func TestFollowReplacedOrShrunk(t *testing.T) {
	a := newDumpWriter(false, hdrOpts{})
	a.load(1, 0x1000, 0x10, 1, "JS:*first /a.js:1:1")
	a.load(2, 0x2000, 0x10, 2, "JS:*second /a.js:1:1")
	b := newDumpWriter(false, hdrOpts{})
	b.load(1, 0x3000, 0x10, 1, "JS:*third /a.js:1:1")

	t.Run("replaced", func(t *testing.T) {
		path := writeFile(t, "jit-1.dump", a.bytes())
		p := followFiles(t, KindJitdump, path)
		if err := p.Update(); err != nil {
			t.Fatal(err)
		}
		// A new file renamed over the path (another inode), larger than
		// the old one: only the inode tells.
		nb := append(b.bytes(), make([]byte, 0)...)
		nb = append(nb, a.bytes()[headerSize:]...)
		tmp := filepath.Join(filepath.Dir(path), "new")
		if err := os.WriteFile(tmp, nb, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		if err := p.Update(); err != nil {
			t.Fatal(err)
		}
		if got := names(p.Index()); !slices.Equal(got, []string{"JS:*third /a.js:1:1", "JS:*first /a.js:1:1", "JS:*second /a.js:1:1"}) {
			t.Errorf("after replacement: %q", got)
		}
	})
	t.Run("shrunk", func(t *testing.T) {
		path := writeFile(t, "jit-1.dump", a.bytes())
		p := followFiles(t, KindJitdump, path)
		if err := p.Update(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b.bytes(), 0o644); err != nil { // same inode, truncated
			t.Fatal(err)
		}
		if err := p.Update(); err != nil {
			t.Fatal(err)
		}
		if got := names(p.Index()); !slices.Equal(got, []string{"JS:*third /a.js:1:1"}) {
			t.Errorf("after shrinking: %q", got)
		}
	})
}

func TestFollowGrowingPerfMap(t *testing.T) {
	full := []byte("1000 10 JS:*a /a.js:1:1\n0x2000 0x10 long Hot.b(long)\nbad line\n3000 10 JS:*c /c.js:1:1\n")
	path := filepath.Join(t.TempDir(), "perf-1.map")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := followFiles(t, KindPerfMap, path)
	for i := range full {
		f.Write(full[i : i+1])
		if err := p.Update(); err != nil {
			t.Fatal(err)
		}
		info := p.Sources()[0]
		complete := 0
		for _, c := range full[:i+1] {
			if c == '\n' {
				complete++
			}
		}
		if info.Records != complete {
			t.Fatalf("after %d bytes: %d lines read, %d complete", i+1, info.Records, complete)
		}
		if (full[i] != '\n') != (info.Truncated != nil) {
			t.Fatalf("after %d bytes: Truncated = %v", i+1, info.Truncated)
		}
	}
	info := p.Sources()[0]
	if info.Symbols != 3 || info.Bad != 1 {
		t.Errorf("info = %+v", info)
	}
}

// Lookups on Indexes handed out earlier run while Update reads more (run
// with -race). The writer waits for a pass of the reader after each
// update, so the two interleave however the scheduler runs them, and
// each of the reader's passes overlaps the next update.
func TestConcurrentLookupsDuringUpdate(t *testing.T) {
	full := sampleDump()
	path := filepath.Join(t.TempDir(), "jit-1.dump")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := followFiles(t, KindJitdump, path)
	var passes, seen atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ix := p.Index()
			for s := range ix.All() {
				if got, ok := ix.LookupAt(s.Start, s.Loaded); ok && !got.Contains(s.Start) {
					panic("wrong symbol")
				}
				seen.Add(1)
			}
			_ = p.Sources()
			passes.Add(1)
		}
	}()
	for off := 0; off < len(full); off += 7 {
		f.Write(full[off:min(off+7, len(full))])
		if err := p.Update(); err != nil {
			t.Fatal(err)
		}
		for n := passes.Load(); passes.Load() == n; {
			runtime.Gosched()
		}
	}
	close(stop)
	<-done
	if seen.Load() == 0 {
		t.Error("the reader never saw a symbol")
	}
}
