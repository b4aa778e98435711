package testutil

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// PerfDataSample is one PERF_RECORD_SAMPLE of a perf.data file, as
// ScanPerfData decodes it: what a benchmark needs to hand perf's own
// samples to stallwatch, so that both tools process the same samples.
type PerfDataSample struct {
	PID, TID uint32
	Time     uint64 // the event's clock (CLOCK_MONOTONIC under -k mono)
	Period   uint64
	// Chain is the raw callchain, context markers (PERF_CONTEXT_KERNEL,
	// PERF_CONTEXT_USER) included.
	Chain []uint64
	// IP, SP and BP are the user registers, when the sample has them
	// (--call-graph dwarf); Stack is the copy of the user stack from SP,
	// cut to the size the kernel filled (dyn_size).
	IP, SP, BP uint64
	HasRegs    bool
	Stack      []byte
}

// Sample fields of linux/perf_event.h, in the order a sample lays them out.
const (
	sampleIP          = 1 << 0
	sampleTID         = 1 << 1
	sampleTime        = 1 << 2
	sampleAddr        = 1 << 3
	sampleRead        = 1 << 4
	sampleCallchain   = 1 << 5
	sampleID          = 1 << 6
	sampleCPU         = 1 << 7
	samplePeriod      = 1 << 8
	sampleStreamID    = 1 << 9
	sampleRaw         = 1 << 10
	sampleBranchStack = 1 << 11
	sampleRegsUser    = 1 << 12
	sampleStackUser   = 1 << 13
	sampleIdentifier  = 1 << 16

	recordLost        = 2
	recordComm        = 3
	recordSample      = 9
	recordLostSamples = 13

	// x86-64's perf_regs indices.
	regBP, regSP, regIP = 6, 7, 8
)

// perfAttr is what ScanPerfData needs of an event's perf_event_attr.
type perfAttr struct {
	sampleType, regsUser uint64
}

// PerfDataInfo is what ScanPerfData read besides the samples: the
// threads' names from COMM records, and what the kernel said was lost
// (PERF_RECORD_LOST's records, PERF_RECORD_LOST_SAMPLES' samples).
type PerfDataInfo struct {
	Comms       map[uint32]string
	LostRecords uint64
	LostSamples uint64
}

// ScanPerfData reads a perf.data file written by `perf record` (not a
// pipe, not compressed) record by record, calling each for every sample
// (its slices are valid only during the call: a file of stack copies is
// gigabytes). Samples whose fields it cannot lay out (PERF_SAMPLE_READ,
// RAW, BRANCH_STACK) make it fail rather than guess.
func ScanPerfData(path string, each func(*PerfDataSample)) (*PerfDataInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fail := func(off uint64, format string, args ...any) error {
		return fmt.Errorf("%s: offset %d: %s", path, off, fmt.Sprintf(format, args...))
	}
	var h [104]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || string(h[:8]) != "PERFILE2" {
		return nil, fail(0, "not a perf.data file (perf record -o FILE, not a pipe)")
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	u64 := binary.LittleEndian.Uint64
	n := uint64(fi.Size())
	attrSize := u64(h[16:])
	attrOff, attrLen := u64(h[24:]), u64(h[32:])
	dataOff, dataLen := u64(h[40:]), u64(h[48:])
	if attrSize < 16+96 || attrSize > 4096 || attrOff > n || attrLen > n-attrOff || attrLen > 1<<20 || dataOff > n || dataLen > n-dataOff {
		return nil, fail(16, "sections outside the file")
	}
	ab := make([]byte, attrLen)
	if _, err := f.ReadAt(ab, int64(attrOff)); err != nil {
		return nil, fail(attrOff, "attributes: %v", err)
	}
	var attrs []perfAttr
	for off := uint64(0); off+attrSize <= attrLen; off += attrSize {
		attrs = append(attrs, perfAttr{sampleType: u64(ab[off+24:]), regsUser: u64(ab[off+80:])})
	}
	if len(attrs) == 0 {
		return nil, fail(attrOff, "no event attributes")
	}
	for _, a := range attrs {
		// With several events a sample says which by its first field.
		if len(attrs) > 1 && a.sampleType&sampleIdentifier == 0 {
			return nil, fail(attrOff, "%d events without PERF_SAMPLE_IDENTIFIER: samples cannot be told apart", len(attrs))
		}
		if a.sampleType&(sampleRead|sampleRaw|sampleBranchStack) != 0 {
			return nil, fail(attrOff, "sample_type %#x has fields this reader does not lay out", a.sampleType)
		}
		if a != attrs[0] {
			return nil, fail(attrOff, "events with different sample layouts")
		}
	}
	info := &PerfDataInfo{Comms: map[uint32]string{}}
	r := bufio.NewReaderSize(io.NewSectionReader(f, int64(dataOff), int64(dataLen)), 1<<20)
	rec := make([]byte, 1<<16)
	var s PerfDataSample
	for off := dataOff; off < dataOff+dataLen; {
		if _, err := io.ReadFull(r, rec[:8]); err != nil {
			return nil, fail(off, "record header: %v", err)
		}
		typ := binary.LittleEndian.Uint32(rec)
		size := int(binary.LittleEndian.Uint16(rec[6:]))
		if size < 8 {
			return nil, fail(off, "record of %d bytes", size)
		}
		if _, err := io.ReadFull(r, rec[8:size]); err != nil {
			return nil, fail(off, "record of %d bytes: %v", size, err)
		}
		body := rec[8:size]
		switch typ {
		case recordSample:
			if err := decodePerfSample(body, attrs[0], &s); err != nil {
				return nil, fail(off, "sample: %v", err)
			}
			each(&s)
		case recordComm:
			if len(body) >= 8 {
				tid := binary.LittleEndian.Uint32(body[4:])
				name, _, _ := bytes.Cut(body[8:], []byte{0})
				info.Comms[tid] = string(name)
			}
		case recordLost:
			if len(body) >= 16 {
				info.LostRecords += binary.LittleEndian.Uint64(body[8:]) // id, lost
			}
		case recordLostSamples:
			if len(body) >= 8 {
				info.LostSamples += binary.LittleEndian.Uint64(body)
			}
		}
		off += uint64(size)
	}
	return info, nil
}

// decodePerfSample lays a sample's body out by its event's sample_type,
// into s (whose Chain it reuses).
func decodePerfSample(b []byte, a perfAttr, s *PerfDataSample) error {
	*s = PerfDataSample{Chain: s.Chain[:0]}
	off := 0
	u64 := func() uint64 {
		if off+8 > len(b) {
			off = len(b) + 1
			return 0
		}
		v := binary.LittleEndian.Uint64(b[off:])
		off += 8
		return v
	}
	st := a.sampleType
	if st&sampleIdentifier != 0 {
		u64()
	}
	if st&sampleIP != 0 {
		u64()
	}
	if st&sampleTID != 0 {
		v := u64()
		s.PID, s.TID = uint32(v), uint32(v>>32)
	}
	if st&sampleTime != 0 {
		s.Time = u64()
	}
	for _, skip := range []uint64{sampleAddr, sampleID, sampleStreamID, sampleCPU} {
		if st&skip != 0 {
			u64()
		}
	}
	if st&samplePeriod != 0 {
		s.Period = u64()
	}
	if st&sampleCallchain != 0 {
		nr := u64()
		if nr > uint64(len(b))/8 {
			return fmt.Errorf("callchain of %d entries in a %d-byte record", nr, len(b))
		}
		for range nr {
			s.Chain = append(s.Chain, u64())
		}
	}
	if st&sampleRegsUser != 0 {
		if abi := u64(); abi != 0 {
			for bit := range 64 {
				if a.regsUser&(1<<bit) == 0 {
					continue
				}
				v := u64()
				switch bit {
				case regBP:
					s.BP = v
				case regSP:
					s.SP = v
				case regIP:
					s.IP = v
				}
			}
			const need = 1<<regBP | 1<<regSP | 1<<regIP
			s.HasRegs = a.regsUser&need == need
		}
	}
	if st&sampleStackUser != 0 {
		size := u64()
		if off > len(b) || size > uint64(len(b)-off) {
			return fmt.Errorf("stack copy of %d bytes in a %d-byte record", size, len(b))
		}
		s.Stack = b[off : off+int(size)]
		off += int(size)
		if size > 0 {
			if dyn := u64(); dyn < size {
				s.Stack = s.Stack[:dyn]
			}
		}
	}
	if off > len(b) {
		return fmt.Errorf("%d-byte record shorter than its sample_type %#x", len(b), st)
	}
	return nil
}
