package report

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/pprof/profile"
	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/model"
)

// MaxProfileBytes bounds a profile read from disk, on disk and after
// decompression alike: 256 MiB of pprof is about two million distinct
// stacks, far more than a capture writes, and what stallwatch needs to
// parse it stays well under 2 GiB. A gzip bomb stops here.
const MaxProfileBytes = 256 << 20

// ErrTooLarge is matched by the errors of inputs past their bound.
var ErrTooLarge = errors.New("input too large")

// fileID names a file by device and inode: the same file under any path.
type fileID struct{ dev, ino uint64 }

func idOf(f *os.File) (fileID, bool) {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return fileID{}, false
	}
	return fileID{st.Dev, st.Ino}, true
}

// ReadFrom reports whether path names one of the files c was read from
// (by device and inode, so another name for the same file counts): a
// rendering written there would replace its own input.
func (c *Capture) ReadFrom(path string) bool {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return false
	}
	for _, id := range c.inputs {
		if id == (fileID{st.Dev, st.Ino}) {
			return true
		}
	}
	return false
}

func (c *Capture) input(f *os.File) {
	if id, ok := idOf(f); ok {
		c.inputs = append(c.inputs, id)
	}
}

// Open reads what path names, for rendering: a capture directory, its
// capture.json, a thread dump in JSON (threads.json, or `stallwatch
// snapshot --format json`), or a pprof file. Only regular files are read
// (a FIFO or a device is refused, without blocking), each within its
// bound, and a cancelled ctx (SIGINT) stops the reading.
func Open(ctx context.Context, path string) (*Capture, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	switch {
	case st.IsDir():
		return ReadCapture(ctx, path)
	case filepath.Base(path) == capdir.FileInfo:
		return ReadCapture(ctx, filepath.Dir(path))
	}
	f, err := safedir.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	c := &Capture{}
	c.input(f)
	if strings.HasSuffix(path, ".json") {
		if c.Threads, err = readThreadDump(ctx, f, path); err != nil {
			return nil, err
		}
		return c, nil
	}
	if c.Profile, err = parseProfile(ctx, f, path); err != nil {
		return nil, err
	}
	if len(c.Profile.SampleType) == 1 && c.Profile.SampleType[0].Type == model.TypeThreads {
		if c.Threads, err = ThreadsFromProfile(c.Profile); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return c, nil
}

// ReadCapture reads a capture directory back: capture.json, profile.pb.gz,
// and the snapshot (threads.json; threads.pb.gz when that is all there is).
func ReadCapture(ctx context.Context, dir string) (*Capture, error) {
	d, err := capdir.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return Load(ctx, d)
}

// Load reads the profile and the snapshot of an open capture directory;
// its Info is d.Info as it stands (changed or not).
func Load(ctx context.Context, d *capdir.Dir) (*Capture, error) {
	c := &Capture{Info: d.Info}
	if f, err := d.Open(capdir.FileInfo); err == nil {
		c.input(f)
		f.Close()
	}
	name := filepath.Join(d.Path, capdir.FileProfile)
	switch f, err := d.Open(capdir.FileProfile); {
	case errors.Is(err, fs.ErrNotExist):
		// A capture whose profile could not be written still has its
		// snapshot and its facts.
	case err != nil:
		return nil, err
	default:
		defer f.Close()
		c.input(f)
		if c.Profile, err = parseProfile(ctx, f, name); err != nil {
			return nil, err
		}
	}
	open := func(name string) (*os.File, string, error) {
		f, err := d.Open(name)
		if err != nil {
			return nil, "", err
		}
		c.input(f)
		return f, filepath.Join(d.Path, name), nil
	}
	switch {
	case d.Has(capdir.FileThreadJSON):
		f, name, err := open(capdir.FileThreadJSON)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if c.Threads, err = readThreadDump(ctx, f, name); err != nil {
			return nil, err
		}
	case d.Has(capdir.FileThreads):
		f, name, err := open(capdir.FileThreads)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		tp, err := parseProfile(ctx, f, name)
		if err != nil {
			return nil, err
		}
		if c.Threads, err = ThreadsFromProfile(tp); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		// capture.json, not the profile, says whose threads they are.
		c.Threads.PID, c.Threads.Command = d.Info.PID, d.Info.Command
	}
	return c, nil
}

// readThreadDump reads a thread dump in JSON from f, its size checked
// before reading.
func readThreadDump(ctx context.Context, f *os.File, name string) (*model.Snapshot, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > model.MaxSnapshotJSON {
		return nil, fmt.Errorf("%s is %d MiB, more than the %d MiB of thread dump stallwatch reads: %w", name, st.Size()>>20, model.MaxSnapshotJSON>>20, ErrTooLarge)
	}
	return model.ReadSnapshotJSON(ctxReader{ctx, f}, name)
}

// ReadProfile reads a pprof file (gzipped or not) within MaxProfileBytes.
func ReadProfile(ctx context.Context, path string) (*profile.Profile, error) {
	f, err := safedir.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseProfile(ctx, f, path)
}

// parseProfile reads a profile from f within MaxProfileBytes.
func parseProfile(ctx context.Context, f *os.File, name string) (*profile.Profile, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return decodeProfile(ctx, f, st.Size(), name, MaxProfileBytes)
}

// decodeProfile reads a profile of size bytes from r. The size is checked
// before reading, gzip is decompressed here within limit (pprof's own
// reader has no bound), and a profile compressed twice is refused rather
// than handed to a parser that would decompress it without a bound.
func decodeProfile(ctx context.Context, r io.Reader, size int64, name string, limit int64) (*profile.Profile, error) {
	if size > limit {
		return nil, tooLarge(name, fmt.Sprintf("is %d MiB, more", size>>20), limit)
	}
	br := bufio.NewReaderSize(ctxReader{ctx, r}, 64<<10)
	var src io.Reader = br
	if isGzip(br) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: not a pprof profile: %v", name, err)
		}
		src = zr
	}
	// Checked on both sides: a little compressed input already read may
	// decompress to much.
	data, err := readAtMost(ctxReader{ctx, src}, limit)
	if errors.Is(err, ErrTooLarge) {
		return nil, tooLarge(name, "decompresses to more", limit)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", name, context.Cause(ctx))
		}
		return nil, fmt.Errorf("%s: not a pprof profile: %v", name, err)
	}
	if bytes.HasPrefix(data, gzipMagic) {
		return nil, fmt.Errorf("%s: not a pprof profile: gzip inside gzip", name)
	}
	p, err := profile.ParseData(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not a pprof profile: %v", name, err)
	}
	return p, nil
}

var gzipMagic = []byte{0x1f, 0x8b}

func isGzip(r *bufio.Reader) bool {
	b, _ := r.Peek(2)
	return bytes.Equal(b, gzipMagic)
}

func tooLarge(name, what string, limit int64) error {
	return fmt.Errorf("%s %s than the %d MiB of profile stallwatch reads: %w (go tool pprof reads larger ones)",
		name, what, limit>>20, ErrTooLarge)
}

// readAtMost reads r to its end, failing with ErrTooLarge past limit
// bytes. It reads in chunks and joins them once: a growing buffer would
// allocate twice the data and copy it at every step.
func readAtMost(r io.Reader, limit int64) ([]byte, error) {
	const chunk = 1 << 20
	var chunks [][]byte
	var total int64
	for {
		buf := make([]byte, chunk)
		n, err := io.ReadFull(r, buf)
		total += int64(n)
		if total > limit {
			return nil, ErrTooLarge
		}
		if n > 0 {
			chunks = append(chunks, buf[:n])
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if len(chunks) == 1 {
		return chunks[0], nil
	}
	return bytes.Join(chunks, nil), nil
}

// ctxReader ends a read when ctx is done: SIGINT stops a long read.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}
