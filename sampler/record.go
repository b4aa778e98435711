package sampler

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

// Record types and flags from linux/perf_event.h that the ring carries.
const (
	recLost        = unix.PERF_RECORD_LOST
	recComm        = unix.PERF_RECORD_COMM
	recExit        = unix.PERF_RECORD_EXIT
	recThrottle    = unix.PERF_RECORD_THROTTLE
	recUnthrottle  = unix.PERF_RECORD_UNTHROTTLE
	recFork        = unix.PERF_RECORD_FORK
	recSample      = unix.PERF_RECORD_SAMPLE
	recLostSamples = unix.PERF_RECORD_LOST_SAMPLES
	recSwitch      = unix.PERF_RECORD_SWITCH

	miscSwitchOut        = unix.PERF_RECORD_MISC_SWITCH_OUT
	miscSwitchOutPreempt = unix.PERF_RECORD_MISC_SWITCH_OUT_PREEMPT
)

// Every event the sampler opens has these sample_type bits, so that the
// sample_id trailer of non-sample records (sample_id_all) has one layout
// whatever event wrote it, and a sample starts with the id of its event.
const commonSampleType = unix.PERF_SAMPLE_IDENTIFIER | unix.PERF_SAMPLE_TID |
	unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU

// sampleType is what the sampling events (on- and off-CPU) ask for; the
// user registers and stack are added when a dump is configured.
const sampleType = commonSampleType | unix.PERF_SAMPLE_IP |
	unix.PERF_SAMPLE_PERIOD | unix.PERF_SAMPLE_CALLCHAIN

// trailerSize is the sample_id trailer: pid, tid u32; time u64; cpu, res
// u32; identifier u64.
const trailerSize = 32

const headerSize = 8

// Callchain context markers (linux/perf_event.h, enum perf_callchain_context).
const (
	contextKernel = ^uint64(128) + 1  // PERF_CONTEXT_KERNEL (-128)
	contextUser   = ^uint64(512) + 1  // PERF_CONTEXT_USER (-512)
	contextMax    = ^uint64(4095) + 1 // PERF_CONTEXT_MAX (-4095): markers are >= this
)

// layout says how the body of a sample from one event is laid out beyond
// the common fields.
type layout struct {
	nregs int  // registers in PERF_SAMPLE_REGS_USER (0: not asked)
	stack bool // PERF_SAMPLE_STACK_USER asked
}

// record is one decoded ring record. Slices alias the bytes it was decoded
// from: copy what is kept.
type record struct {
	typ  uint32
	misc uint16

	// From the sample body or the sample_id trailer.
	pid, tid uint32
	time     uint64
	cpu      uint32
	id       uint64

	// PERF_RECORD_SAMPLE.
	ip        uint64
	period    uint64
	chain     []byte // nr u64 entries, raw
	regsABI   uint64
	regs      []byte // nregs u64, raw
	stackDump []byte
	// stackAsked is the copy's size the kernel set out to make (the
	// record's static size); stackDump holds what it copied (dyn_size).
	stackAsked int

	// PERF_RECORD_LOST, LOST_SAMPLES.
	lost uint64
	// PERF_RECORD_FORK, EXIT: the task that was created or exited.
	taskPid, taskTid, parentPid, parentTid uint32
	// PERF_RECORD_COMM.
	comm string
}

// decodeError says what was wrong with a record and where.
type decodeError struct {
	typ    uint32
	offset int // within the record
	reason string
}

func (e *decodeError) Error() string {
	return fmt.Sprintf("perf record type %d: offset %d: %s", e.typ, e.offset, e.reason)
}

// cursor reads little-endian (native on every supported architecture)
// fields from a record, failing instead of reading past its end.
type cursor struct {
	b   []byte
	off int
	err *decodeError
	typ uint32
}

func (c *cursor) fail(reason string) {
	if c.err == nil {
		c.err = &decodeError{typ: c.typ, offset: c.off, reason: reason}
	}
}

func (c *cursor) u64() uint64 {
	if c.err != nil || len(c.b)-c.off < 8 {
		c.fail("truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(c.b[c.off:])
	c.off += 8
	return v
}

func (c *cursor) u32() uint32 {
	if c.err != nil || len(c.b)-c.off < 4 {
		c.fail("truncated")
		return 0
	}
	v := binary.LittleEndian.Uint32(c.b[c.off:])
	c.off += 4
	return v
}

// bytes returns the next n bytes, or fails if fewer remain (n comes from
// the record itself and is never trusted for an allocation).
func (c *cursor) bytes(n uint64, what string) []byte {
	if c.err != nil {
		return nil
	}
	if n > uint64(len(c.b)-c.off) {
		c.fail(fmt.Sprintf("%s of %d bytes runs past the record's %d", what, n, len(c.b)))
		return nil
	}
	v := c.b[c.off : c.off+int(n)]
	c.off += int(n)
	return v
}

// decodeRecord decodes one whole record (header included). layoutOf tells
// the sample layout of an event id; a sample of an unknown id is an error.
func decodeRecord(b []byte, layoutOf func(id uint64) (layout, bool)) (record, error) {
	var r record
	if len(b) < headerSize {
		return r, &decodeError{reason: fmt.Sprintf("record of %d bytes is shorter than its header", len(b))}
	}
	r.typ = binary.LittleEndian.Uint32(b)
	r.misc = binary.LittleEndian.Uint16(b[4:])
	if size := int(binary.LittleEndian.Uint16(b[6:])); size != len(b) {
		return r, &decodeError{typ: r.typ, reason: fmt.Sprintf("header says %d bytes, record has %d", size, len(b))}
	}
	c := &cursor{b: b, off: headerSize, typ: r.typ}
	if r.typ == recSample {
		decodeSample(c, &r, layoutOf)
	} else {
		decodeOther(c, &r)
	}
	if c.err != nil {
		return r, c.err
	}
	return r, nil
}

func decodeSample(c *cursor, r *record, layoutOf func(uint64) (layout, bool)) {
	r.id = c.u64()
	lay, ok := layoutOf(r.id)
	if c.err == nil && !ok {
		c.fail(fmt.Sprintf("sample from unknown event id %d", r.id))
		return
	}
	r.ip = c.u64()
	r.pid, r.tid = c.u32(), c.u32()
	r.time = c.u64()
	r.cpu = c.u32()
	_ = c.u32()
	r.period = c.u64()
	nr := c.u64()
	if c.err == nil && nr > uint64(len(c.b))/8 {
		c.fail(fmt.Sprintf("callchain of %d entries cannot fit", nr))
		return
	}
	r.chain = c.bytes(nr*8, "callchain")
	if lay.nregs > 0 {
		r.regsABI = c.u64()
		if r.regsABI != unix.PERF_SAMPLE_REGS_ABI_NONE {
			r.regs = c.bytes(uint64(lay.nregs)*8, "user registers")
		}
	}
	if lay.stack {
		size := c.u64()
		r.stackDump = c.bytes(size, "user stack")
		r.stackAsked = len(r.stackDump)
		if size > 0 {
			dyn := c.u64()
			if dyn < uint64(len(r.stackDump)) {
				r.stackDump = r.stackDump[:dyn]
			}
		}
	}
}

// decodeOther decodes a non-sample record: its body, then the sample_id
// trailer at its end.
func decodeOther(c *cursor, r *record) {
	if len(c.b) < headerSize+trailerSize {
		c.fail("too short for its sample_id trailer")
		return
	}
	body := &cursor{b: c.b[:len(c.b)-trailerSize], off: headerSize, typ: r.typ}
	switch r.typ {
	case recLost:
		_ = body.u64() // id of the event whose records were lost
		r.lost = body.u64()
	case recLostSamples:
		r.lost = body.u64()
	case recFork, recExit:
		r.taskPid, r.parentPid = body.u32(), body.u32()
		r.taskTid, r.parentTid = body.u32(), body.u32()
		_ = body.u64() // time, also in the trailer
	case recComm:
		_, _ = body.u32(), body.u32() // pid, tid: the same as the trailer's
		name := body.bytes(uint64(len(body.b)-body.off), "comm")
		for i, ch := range name {
			if ch == 0 {
				name = name[:i]
				break
			}
		}
		r.comm = string(name)
	}
	if body.err != nil {
		c.err = body.err
		return
	}
	t := &cursor{b: c.b, off: len(c.b) - trailerSize, typ: r.typ}
	r.pid, r.tid = t.u32(), t.u32()
	r.time = t.u64()
	r.cpu = t.u32()
	_ = t.u32()
	r.id = t.u64()
}

// callchain turns the raw callchain of a sample into a stack, innermost
// first: kernel entries, then user entries, context markers removed.
// kernel is the number of kernel entries at the front.
func callchain(raw []byte, dst []uint64) (stack []uint64, kernel int) {
	stack = dst[:0]
	ctx := uint64(0)
	userAt := -1
	for i := 0; i+8 <= len(raw); i += 8 {
		v := binary.LittleEndian.Uint64(raw[i:])
		if v >= contextMax {
			ctx = v
			continue
		}
		switch ctx {
		case contextKernel:
			// Kernel entries always come before user ones; a kernel
			// entry after user ones would be a misread chain: drop it.
			if userAt >= 0 {
				continue
			}
			stack = append(stack, v)
			kernel++
		case contextUser:
			if userAt < 0 {
				userAt = len(stack)
			}
			stack = append(stack, v)
		}
		// Hypervisor and guest contexts are not ours: skipped.
	}
	return stack, kernel
}
