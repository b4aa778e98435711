package hotspot

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// An image is the part of a real JVM's memory a reading touched: the
// pages it read and libjvm's symbols it looked up. Recorded once from a
// live JVM (go test -run TestRecordImage -record), it lets the readers be
// tested without a JVM, and fuzzed by corrupting real structures.
type image struct {
	syms  map[string]uint64
	pages map[uint64][]byte // page base → its bytes (fewer than a page where reading stopped)
}

var record = flag.Bool("record", false, "record testdata/images/*.img.gz from live JVMs")

func (im *image) ReadAt(p []byte, addr uint64) (int, error) {
	n := 0
	for n < len(p) {
		a := addr + uint64(n)
		pg, ok := im.pages[a&^(pageSize-1)]
		off := int(a & (pageSize - 1))
		if !ok || off >= len(pg) {
			return n, errors.New("not in the image")
		}
		n += copy(p[n:], pg[off:])
	}
	return n, nil
}

func (im *image) Symbol(name string) (uint64, uint64, bool) {
	a, ok := im.syms[name]
	return a, 0, ok
}

// recorder wraps a live memory and symbols, keeping what is read.
type recorder struct {
	mem  Memory
	syms liveSymbols
	im   *image
}

func (r *recorder) ReadAt(p []byte, addr uint64) (int, error) {
	n, err := r.mem.ReadAt(p, addr)
	if len(p) == pageSize && addr%pageSize == 0 {
		r.im.pages[addr] = append([]byte(nil), p[:max(n, 0)]...)
	}
	return n, err
}

func (r *recorder) Symbol(name string) (uint64, uint64, bool) {
	a, _, ok := r.syms.Symbol(name)
	if ok {
		r.im.syms[name] = a
	}
	return a, 0, ok
}

// readImage reads what an image's reading reads: the layout, then the Java
// threads, within limits; used hears of each range read.
func readImage(mem Memory, syms Symbols, limits Limits, used func(uint64, int)) (*Java, *Reader, error) {
	r := NewReader(mem, limits)
	r.used = used
	l, err := ReadLayout(r, syms)
	if err != nil {
		return nil, r, err
	}
	vm, err := NewVM(r, syms, l)
	if err != nil {
		return nil, r, err
	}
	j, err := vm.ReadJava(nil)
	return j, r, err
}

func (im *image) write(path string) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	w := func(v any) { binary.Write(zw, binary.LittleEndian, v) }
	names := make([]string, 0, len(im.syms))
	for n := range im.syms {
		names = append(names, n)
	}
	slices.Sort(names)
	w(uint32(len(names)))
	for _, n := range names {
		w(uint16(len(n)))
		zw.Write([]byte(n))
		w(im.syms[n])
	}
	bases := make([]uint64, 0, len(im.pages))
	for b := range im.pages {
		bases = append(bases, b)
	}
	slices.Sort(bases)
	w(uint32(len(bases)))
	for _, b := range bases {
		w(b)
		w(uint16(len(im.pages[b])))
		zw.Write(im.pages[b])
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

func loadImage(t testing.TB, name string) *image {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "images", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	im, err := parseImage(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return im
}

func parseImage(b []byte) (*image, error) {
	im := &image{syms: map[string]uint64{}, pages: map[uint64][]byte{}}
	r := bytes.NewReader(b)
	rd := func(v any) error { return binary.Read(r, binary.LittleEndian, v) }
	var n uint32
	if err := rd(&n); err != nil {
		return nil, err
	}
	for range n {
		var l uint16
		if err := rd(&l); err != nil {
			return nil, err
		}
		name := make([]byte, l)
		if _, err := io.ReadFull(r, name); err != nil {
			return nil, err
		}
		var a uint64
		if err := rd(&a); err != nil {
			return nil, err
		}
		im.syms[string(name)] = a
	}
	if err := rd(&n); err != nil {
		return nil, err
	}
	for range n {
		var base uint64
		var l uint16
		if err := rd(&base); err != nil {
			return nil, err
		}
		if err := rd(&l); err != nil {
			return nil, err
		}
		if l > pageSize {
			return nil, fmt.Errorf("page %#x of %d bytes", base, l)
		}
		pg := make([]byte, l)
		if _, err := io.ReadFull(r, pg); err != nil {
			return nil, err
		}
		im.pages[base] = pg
	}
	return im, nil
}

// TestRecordImage records the images the offline tests and the fuzz
// targets read: a JVM in a synchronized deadlock, and one held at a
// safepoint. Run with -record after a change to Stall.java or the JDK.
func TestRecordImage(t *testing.T) {
	if !*record {
		t.Skip("records only with -record")
	}
	testutil.RequirePtrace(t)
	for _, c := range []struct {
		file  string
		flags []string
		mode  string
	}{
		{"jdk17-deadlock.img.gz", nil, "deadlock"},
		{"jdk17-lockdeadlock.img.gz", nil, "lockdeadlock"},
	} {
		tg := startStall(t, c.flags, c.mode)
		mem, syms := openLive(t, tg.Pid)
		rec := &recorder{mem: mem, syms: syms, im: &image{syms: map[string]uint64{}, pages: map[uint64][]byte{}}}
		// Only the bytes a reading uses are kept (the rest zeroed): the
		// code cache's pages are mostly machine code no reader looks at.
		used := map[uint64]bool{}
		if _, _, err := readImage(rec, rec, Limits{}, func(a uint64, n int) {
			for i := range uint64(n) {
				used[a+i] = true
			}
		}); err != nil {
			t.Fatal(err)
		}
		for base, pg := range rec.im.pages {
			for i := range pg {
				if !used[base+uint64(i)] {
					pg[i] = 0
				}
			}
		}
		if err := os.MkdirAll(filepath.Join("testdata", "images"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := rec.im.write(filepath.Join("testdata", "images", c.file)); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d pages, %d symbols", c.file, len(rec.im.pages), len(rec.im.syms))
	}
}
