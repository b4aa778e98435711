package jit

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
)

// dumpWriter writes jitdumps for tests, in either byte order, including
// records no real writer would produce (lying sizes, unknown ids).
type dumpWriter struct {
	order binary.ByteOrder
	b     bytes.Buffer
}

type hdrOpts struct {
	extra int    // bytes after the 40-byte header (total_size > 40)
	flags uint64 // FlagArchTimestamp
	pid   uint32
}

func newDumpWriter(big bool, h hdrOpts) *dumpWriter {
	w := &dumpWriter{order: binary.LittleEndian}
	if big {
		w.order = binary.BigEndian
	}
	if h.pid == 0 {
		h.pid = 4242
	}
	w.u32(Magic)
	w.u32(1)
	w.u32(uint32(headerSize + h.extra))
	w.u32(62)
	w.u32(0xdeadbeef)
	w.u32(h.pid)
	w.u64(1_700_000_000_000_000_000)
	w.u64(h.flags)
	w.b.Write(make([]byte, h.extra))
	return w
}

func (w *dumpWriter) u32(v uint32) { _ = binary.Write(&w.b, w.order, v) }
func (w *dumpWriter) u64(v uint64) { _ = binary.Write(&w.b, w.order, v) }

// record writes a prefix whose total_size is what the body makes it,
// plus pad bytes of padding.
func (w *dumpWriter) record(id uint32, t uint64, body []byte) int64 {
	off := int64(w.b.Len())
	w.u32(id)
	w.u32(uint32(prefixSize + len(body)))
	w.u64(t)
	w.b.Write(body)
	return off
}

// rawRecord writes a prefix with any total_size, and body as it is.
func (w *dumpWriter) rawRecord(id, size uint32, t uint64, body []byte) int64 {
	off := int64(w.b.Len())
	w.u32(id)
	w.u32(size)
	w.u64(t)
	w.b.Write(body)
	return off
}

func (w *dumpWriter) body(fields ...any) []byte {
	var b bytes.Buffer
	for _, f := range fields {
		switch v := f.(type) {
		case string:
			b.WriteString(v)
			b.WriteByte(0)
		case []byte:
			b.Write(v)
		default:
			_ = binary.Write(&b, w.order, v)
		}
	}
	return b.Bytes()
}

func (w *dumpWriter) load(t, addr, size, index uint64, name string) int64 {
	return w.record(uint32(CodeLoad), t, w.body(uint32(4242), uint32(4243), addr, addr, size, index, name, make([]byte, size)))
}

func (w *dumpWriter) move(t, oldAddr, newAddr, size, index uint64) int64 {
	return w.record(uint32(CodeMove), t, w.body(uint32(4242), uint32(4243), newAddr, oldAddr, newAddr, size, index))
}

type dbgEntry struct {
	addr    uint64
	line    int32
	discrim int32
	file    string // "\xff": same as the entry before
}

func (w *dumpWriter) debug(t, addr uint64, entries ...dbgEntry) int64 {
	fields := []any{addr, uint64(len(entries))}
	for _, e := range entries {
		fields = append(fields, e.addr, e.line, e.discrim, e.file)
	}
	return w.record(uint32(CodeDebugInfo), t, w.body(fields...))
}

func (w *dumpWriter) close(t uint64) int64 { return w.record(uint32(CodeClose), t, nil) }

func (w *dumpWriter) unwinding(t uint64, ehFrameHdr, ehFrame []byte) int64 {
	n := uint64(len(ehFrameHdr) + len(ehFrame))
	// Padded to 8 bytes, as perf's writers do.
	pad := make([]byte, (8-n%8)%8)
	return w.record(uint32(CodeUnwindingInfo), t, w.body(n, uint64(len(ehFrameHdr)), n, ehFrameHdr, ehFrame, pad))
}

func (w *dumpWriter) bytes() []byte { return bytes.Clone(w.b.Bytes()) }

// writeFile writes b to a new file in a temporary directory.
func writeFile(t testing.TB, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// readBytes reads a jitdump or perf map held in memory.
func readBytes(t testing.TB, name string, b []byte) (*Index, SourceInfo) {
	t.Helper()
	ix, info, err := ReadFile(writeFile(t, name, b), Options{})
	if err != nil {
		t.Fatalf("ReadFile: %v", err)
	}
	return ix, info
}

// names lists the raw names of an index in order.
func names(ix *Index) []string {
	var out []string
	for s := range ix.All() {
		out = append(out, s.Name)
	}
	return out
}
