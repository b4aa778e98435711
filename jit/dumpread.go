package jit

import (
	"fmt"
	"io"
)

const (
	// maxBuf is the most a reader holds of a file at once; records and
	// lines larger than this are read by their head and skipped by size.
	maxBuf = 1 << 20
	minBuf = 4 << 10
)

// dumpReader reads the records of one jitdump and remembers where it
// stopped, so that a growing file is read once, in pieces.
type dumpReader struct {
	name string // the file, for messages

	hdr    Header
	hasHdr bool
	off    int64 // offset of the next record

	// entries is the reused buffer for every CODE_DEBUG_INFO entry,
	// non-nil when line tables are kept.
	entries []debugEntry

	buf      []byte
	bufStart int64 // file offset of buf[0]
	bufLen   int   // valid bytes in buf

	counts  [numRecordTypes]int
	unknown int // records with ids this reader does not know
	bad     int // records skipped because their content contradicts itself

	problems []*FormatError
	// broken is set when the framing is lost (a record size that cannot
	// be right): nothing after it can be found, so reading stops there.
	broken *FormatError
	// partial describes an incomplete last record, nil when the file
	// ends on a record boundary. A writer may still be writing it.
	partial *FormatError
}

func newDumpReader(name string) *dumpReader { return &dumpReader{name: name} }

func (d *dumpReader) problem(off int64, format string, args ...any) *FormatError {
	e := &FormatError{File: d.name, Offset: off, Reason: fmt.Sprintf(format, args...)}
	if len(d.problems) < maxProblems {
		d.problems = append(d.problems, e)
	}
	return e
}

// records counts every record read, of every type.
func (d *dumpReader) records() int {
	n := d.unknown + d.bad
	for _, c := range d.counts {
		n += c
	}
	return n
}

// read decodes the complete records between the last read and size (the
// file's current size) and calls visit for each valid one. Only I/O
// errors are returned; defects in the file are recorded in d.
func (d *dumpReader) read(r io.ReaderAt, size int64, visit func(*record)) error {
	if d.broken != nil {
		return nil
	}
	if !d.hasHdr {
		done, err := d.readHeader(r, size)
		if !done || err != nil {
			return err
		}
	}
	d.partial = nil
	var rec record
	e := endian(d.hdr.BigEndian)
	for d.off < size {
		if size-d.off < prefixSize {
			d.partial = &FormatError{File: d.name, Offset: d.off, Reason: fmt.Sprintf("last record incomplete: %d of its 16-byte prefix written", size-d.off)}
			return nil
		}
		if err := d.fill(r, size, prefixSize); err != nil {
			return err
		}
		b := d.buf[d.off-d.bufStart : d.bufLen]
		rec = record{typ: RecordType(e.u32(b)), off: d.off, size: e.u32(b[4:]), time: e.u64(b[8:])}
		if rec.size < prefixSize {
			d.broken = d.problem(d.off, "%v record with total_size %d, smaller than its 16-byte prefix: cannot find the next record", rec.typ, rec.size)
			return nil
		}
		if d.off+int64(rec.size) > size {
			d.partial = &FormatError{File: d.name, Offset: d.off, Reason: fmt.Sprintf("last record (%v, total_size %d) incomplete: %d bytes written", rec.typ, rec.size, size-d.off)}
			return nil
		}
		// Code and unwinding bytes are never needed: read at most the
		// part that holds names, unless the record fits the buffer.
		want := int(min(int64(rec.size), maxBuf))
		if err := d.fill(r, size, want); err != nil {
			return err
		}
		b = d.buf[d.off-d.bufStart : d.bufLen]
		full := len(b) >= int(rec.size)
		if full {
			b = b[:rec.size]
		}
		if rec.typ == CodeDebugInfo && d.entries != nil {
			rec.dbgEntries = d.entries[:0]
		}
		if rec.typ < numRecordTypes {
			if err := decodeRecord(e, b, full, &rec); err != nil {
				d.bad++
				d.problem(d.off, "%v", err)
			} else {
				d.counts[rec.typ]++
				visit(&rec)
			}
			if rec.dbgEntries != nil {
				d.entries = rec.dbgEntries[:0]
			}
		} else {
			d.unknown++
		}
		d.off += int64(rec.size)
	}
	return nil
}

// readHeader reads the file header once the writer has written it.
func (d *dumpReader) readHeader(r io.ReaderAt, size int64) (bool, error) {
	if size < headerSize {
		if size > 0 {
			d.partial = &FormatError{File: d.name, Offset: 0, Reason: fmt.Sprintf("header incomplete: %d of 40 bytes", size)}
		}
		return false, nil
	}
	var b [headerSize]byte
	if _, err := r.ReadAt(b[:], 0); err != nil {
		return false, fmt.Errorf("read %s header: %w", d.name, err)
	}
	h, err := parseHeader(b[:])
	if err != nil {
		d.broken = d.problem(0, "%v", err)
		return false, nil
	}
	if size < int64(h.Size) {
		d.partial = &FormatError{File: d.name, Offset: 0, Reason: fmt.Sprintf("header incomplete: total_size %d, %d bytes written", h.Size, size)}
		return false, nil
	}
	d.hdr, d.hasHdr, d.off = h, true, int64(h.Size)
	return true, nil
}

// fill makes sure the buffer holds at least want bytes from d.off (fewer
// when the file ends first), reading a large block at once.
func (d *dumpReader) fill(r io.ReaderAt, size int64, want int) error {
	have := d.bufStart + int64(d.bufLen) - d.off
	if d.off >= d.bufStart && have >= int64(want) {
		return nil
	}
	left := size - d.off
	if have >= left && d.off >= d.bufStart {
		return nil // everything the file holds is already here
	}
	if n := int(min(max(left, minBuf), maxBuf)); len(d.buf) < n {
		d.buf = make([]byte, n)
	}
	n := int(min(int64(len(d.buf)), left))
	m, err := r.ReadAt(d.buf[:n], d.off)
	if m < n {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF // the file shrank under us
		}
		return fmt.Errorf("read %s at offset %d: %w", d.name, d.off, err)
	}
	d.bufStart, d.bufLen = d.off, n
	return nil
}

// reset forgets everything read, for a file that was replaced or shrank.
func (d *dumpReader) reset() { *d = dumpReader{name: d.name, buf: d.buf, entries: d.entries} }
