package report

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/safedir"
)

// gzipBomb returns a gzip stream of members, each n zero bytes compressed:
// about n/1000 bytes each. A reader that decompresses all of it holds
// members×n bytes.
func gzipBomb(t testing.TB, n, members int) []byte {
	t.Helper()
	var one bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&one, gzip.BestCompression)
	zero := make([]byte, 1<<20)
	for left := n; left > 0; left -= len(zero) {
		zw.Write(zero[:min(left, len(zero))])
	}
	zw.Close()
	return bytes.Repeat(one.Bytes(), members)
}

// TestReadProfileGzipBomb: the audit's 14 MB gzip bomb (14 GB of zeros)
// took 6.9 GB and 106 s before failing; it is refused at MaxProfileBytes
// of output, in bounded memory.
func TestReadProfileGzipBomb(t *testing.T) {
	bomb := gzipBomb(t, 64<<20, 220)
	if len(bomb) < 14e6 {
		t.Fatalf("bomb of %d bytes, want 14 MB", len(bomb))
	}
	path := filepath.Join(t.TempDir(), "profile.pb.gz")
	if err := os.WriteFile(path, bomb, 0o644); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err := ReadProfile(context.Background(), path)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "decompresses to more than the 256 MiB") {
		t.Fatalf("ReadProfile(gzip bomb) = %v, want ErrTooLarge", err)
	}
	// What the bound guarantees: the decompressed bytes held never pass
	// MaxProfileBytes (and a megabyte of reading buffers).
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > MaxProfileBytes+8<<20 {
		t.Errorf("reading the bomb allocated %d MiB, more than %d MiB", alloc>>20, MaxProfileBytes>>20+8)
	}
	t.Logf("refused in %v", took)
}

func TestReadProfileLimits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// A 2 GB file is refused by its size, before a byte is read.
	sparse := filepath.Join(dir, "sparse.pb.gz")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(2 << 30)
	f.Close()
	if _, err := ReadProfile(ctx, sparse); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "is 2048 MiB") {
		t.Errorf("ReadProfile(2 GB) = %v", err)
	}
	// Devices and FIFOs are not read at all.
	if _, err := ReadProfile(ctx, "/dev/zero"); !errors.Is(err, safedir.ErrNotRegular) {
		t.Errorf("ReadProfile(/dev/zero) = %v", err)
	}
	// A profile gzipped twice would be decompressed again by pprof,
	// without a bound.
	inner := gzipBomb(t, 1<<20, 1)
	var twice bytes.Buffer
	zw := gzip.NewWriter(&twice)
	zw.Write(inner)
	zw.Close()
	if _, err := decodeProfile(ctx, &twice, int64(twice.Len()), "twice", 1<<20); err == nil || !strings.Contains(err.Error(), "gzip inside gzip") {
		t.Errorf("gzip inside gzip: %v", err)
	}
}

// TestReadProfileCancelled: a cancelled context (SIGINT in `stallwatch
// report`) stops a read in the middle.
func TestReadProfileCancelled(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	bomb := gzipBomb(t, 8<<20, 50)
	r := &cancelAfter{r: bytes.NewReader(bomb), n: 64 << 10, cancel: func() { cancel(errors.New("interrupt")) }}
	_, err := decodeProfile(ctx, r, int64(len(bomb)), "bomb", MaxProfileBytes)
	if err == nil || !strings.Contains(err.Error(), "interrupt") {
		t.Fatalf("read after cancel: %v", err)
	}
	if r.read > int64(len(bomb))/2 {
		t.Errorf("read %d of %d bytes after the cancel at 64 KiB", r.read, len(bomb))
	}
}

// cancelAfter cancels once n bytes have been read.
type cancelAfter struct {
	r      io.Reader
	n      int64
	read   int64
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += int64(n)
	if c.read >= c.n {
		c.cancel()
	}
	return n, err
}

// FuzzDecodeProfile: whatever the bytes, decoding never holds more than
// its limit of decompressed data and never panics; what it accepts is a
// valid profile.
func FuzzDecodeProfile(f *testing.F) {
	var valid bytes.Buffer
	if err := WriteProfile(&valid, fixtureCapture(f).Profile); err != nil {
		f.Fatal(err)
	}
	f.Add(valid.Bytes())
	f.Add(gzipBomb(f, 4<<20, 2))
	f.Add(valid.Bytes()[:valid.Len()/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 20
		cr := &countingReader{r: bytes.NewReader(data)}
		p, err := decodeProfile(context.Background(), cr, int64(len(data)), "fuzz", limit)
		if cr.n > int64(len(data)) {
			t.Fatalf("read %d bytes of %d", cr.n, len(data))
		}
		if err == nil {
			if err := p.CheckValid(); err != nil {
				t.Fatalf("accepted an invalid profile: %v", err)
			}
		}
	})
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
