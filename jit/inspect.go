package jit

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/stallwatch/stallwatch/internal/termsafe"
)

// Summary describes one jitdump or perf map: what `stallwatch jit
// inspect` prints.
type Summary struct {
	Path string
	Size int64
	Info SourceInfo
	// Header and Counts are for jitdumps: the file header and how many
	// valid records of each type the file holds.
	Header Header
	Counts map[RecordType]int
	// FirstTime and LastTime span the records' timestamps (as written:
	// TSC ticks when Header.ArchTimestamp()).
	FirstTime, LastTime uint64
	// Symbols is the number of code ranges; Reused counts those loaded
	// over code that was there before (a JIT reusing memory).
	Symbols, Reused int
	// Largest are the biggest pieces of code, largest first.
	Largest []Symbol
}

// largestCount is how many of the biggest functions a Summary lists.
const largestCount = 10

// MarshalText makes record types readable as JSON keys.
func (t RecordType) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Inspect reads a whole jitdump or perf map and summarizes it. Like
// ReadFile it reads the file as it stands, whoever owns it.
func Inspect(path string, opts Options) (*Summary, error) {
	s, err := openFileSource(path)
	if err != nil {
		return nil, err
	}
	defer s.close()
	s.configure(opts)
	size, err := s.size()
	if err != nil {
		return nil, err
	}
	sum := &Summary{Path: path, Size: size}
	// The index is bounded (it may forget replaced code); what the
	// summary counts is counted as the records stream by.
	b := builder{limits: inspectLimits}
	visit := func() {
		if b.n > 0 {
			if sl := b.store.slot(int32(b.n - 1)); !sl.tomb {
				sum.addLargest(sl.sym)
			}
		}
		b.bound()
	}
	if s.dump != nil {
		first := true
		err = s.dump.read(s.f, size, func(r *record) {
			if first || r.time < sum.FirstTime {
				sum.FirstTime = r.time
			}
			if first || r.time > sum.LastTime {
				sum.LastTime = r.time
			}
			first = false
			n := b.n
			s.record(&b, r)
			if b.n > n {
				visit()
			}
		})
		s.sync()
		sum.Header = s.dump.hdr
		sum.Counts = map[RecordType]int{}
		for t, n := range s.dump.counts {
			sum.Counts[RecordType(t)] = n
		}
	} else {
		err = s.pmap.read(s.f, size, true, func(start, size uint64, name []byte) {
			n := b.n
			s.mapLine(&b, start, size, name)
			if b.n > n {
				visit()
			}
		})
		s.sync()
	}
	if err != nil {
		return nil, err
	}
	s.syncLosses(&b)
	sum.Info = s.info
	sum.Symbols = s.info.Symbols
	sum.Reused = b.reused
	return sum, nil
}

// addLargest keeps sym if it is among the largestCount largest so far;
// of equal sizes the one loaded first stays first.
func (s *Summary) addLargest(sym Symbol) {
	if len(s.Largest) == largestCount && sym.Size <= s.Largest[largestCount-1].Size {
		return
	}
	i, _ := slices.BinarySearchFunc(s.Largest, sym.Size, func(e Symbol, size uint64) int {
		if e.Size >= size {
			return -1
		}
		return 1
	})
	s.Largest = slices.Insert(s.Largest, i, sym)
	if len(s.Largest) > largestCount {
		s.Largest = s.Largest[:largestCount]
	}
}

// WriteText writes the summary for people: the header, the records, the
// time span, the largest code and everything wrong, with file offsets.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	in := &s.Info
	// Names and reasons quote what the file holds: escaped, so that a
	// name cannot act on the terminal or fake a line (package termsafe).
	fmt.Fprintf(&b, "%s: %s, %d bytes", termsafe.String(s.Path), in.Kind, s.Size)
	if in.Runtime != RuntimeUnknown {
		fmt.Fprintf(&b, ", written by %s", in.Runtime)
	}
	b.WriteString("\n")
	if in.Kind == KindJitdump {
		h := s.Header
		order := "little-endian"
		if h.BigEndian {
			order = "big-endian"
		}
		fmt.Fprintf(&b, "  header     version %d, %s, %d bytes, elf_mach %d%s, pid %d, flags %#x\n",
			h.Version, order, h.Size, h.ElfMach, machName(h.ElfMach), h.Pid, h.Flags)
		if h.ArchTimestamp() {
			b.WriteString("             ARCH_TIMESTAMP: record times are TSC ticks, not CLOCK_MONOTONIC\n")
		}
		fmt.Fprintf(&b, "  records    %d:", in.Records)
		for t := RecordType(0); t < numRecordTypes; t++ {
			fmt.Fprintf(&b, " %d %v,", s.Counts[t], t)
		}
		fmt.Fprintf(&b, " %d unknown, %d bad\n", in.Unknown, in.Bad)
		if s.Counts[CodeLoad]+s.Counts[CodeMove] > 0 {
			unit := "ns CLOCK_MONOTONIC"
			if h.ArchTimestamp() {
				unit = "TSC ticks"
			}
			fmt.Fprintf(&b, "  time span  %d .. %d %s (%v)\n", s.FirstTime, s.LastTime, unit, spanOf(s, h))
		}
	} else {
		fmt.Fprintf(&b, "  lines      %d: %d bad\n", in.Records, in.Bad)
	}
	fmt.Fprintf(&b, "  code       %d pieces, %d loaded over earlier code\n", s.Symbols, s.Reused)
	for i, sym := range s.Largest {
		fmt.Fprintf(&b, "  %-10s %#x %6d bytes  %s\n", firstOnly(i, "largest"), sym.Start, sym.Size, termsafe.String(sym.Name))
	}
	problems := append([]*FormatError(nil), in.Problems...)
	if in.Truncated != nil {
		problems = append(problems, in.Truncated)
	}
	if len(problems) == 0 {
		b.WriteString("  problems   none\n")
	}
	for i, p := range problems {
		where := fmt.Sprintf("offset %d (%#x)", p.Offset, p.Offset)
		if p.Line > 0 {
			where = fmt.Sprintf("line %d, offset %d", p.Line, p.Offset)
		}
		fmt.Fprintf(&b, "  %-10s %s: %s\n", firstOnly(i, "problems"), where, termsafe.String(p.Reason))
	}
	if more := in.Bad - len(in.Problems); more > 0 && len(in.Problems) == maxProblems {
		fmt.Fprintf(&b, "             ... and more: %d bad in all\n", in.Bad)
	}
	if in.Dropped > 0 {
		fmt.Fprintf(&b, "  bound      %d live code ranges dropped, oldest first, at the memory bound (%d ranges): code loaded over them is not counted above\n", in.Dropped, inspectLimits.symbols)
	}
	if in.Broken != nil {
		fmt.Fprintf(&b, "  reading stopped at offset %d: nothing after it can be found\n", in.Broken.Offset)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the summary as JSON with snake_case keys, as every
// JSON stallwatch writes; record counts are keyed by record type name.
func (s *Summary) WriteJSON(w io.Writer) error {
	in := &s.Info
	v := summaryJSON{
		Path: s.Path, Size: s.Size, Kind: in.Kind.String(), Runtime: in.Runtime.String(),
		Records: in.Records, Bad: in.Bad, Unknown: in.Unknown, Symbols: s.Symbols, Reused: s.Reused,
		Forgotten: in.Forgotten, Dropped: in.Dropped, ReadError: in.ReadError,
		Truncated: problemOf(in.Truncated), Broken: problemOf(in.Broken),
	}
	if in.Kind == KindJitdump {
		h := s.Header
		v.Header = &headerJSON{BigEndian: h.BigEndian, Version: h.Version, Size: h.Size, ElfMach: h.ElfMach,
			Pid: h.Pid, Timestamp: h.Timestamp, Flags: h.Flags, ArchTimestamp: h.ArchTimestamp()}
		v.Counts = map[string]int{}
		for t := RecordType(0); t < numRecordTypes; t++ {
			v.Counts[t.String()] = s.Counts[t]
		}
		v.FirstTime, v.LastTime = s.FirstTime, s.LastTime
	}
	for _, p := range in.Problems {
		v.Problems = append(v.Problems, *problemOf(p))
	}
	for _, sym := range s.Largest {
		v.Largest = append(v.Largest, symbolJSON{Start: sym.Start, Size: sym.Size, Name: sym.Name, Display: sym.Display,
			File: sym.File, Line: sym.Line, Loaded: sym.Loaded})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

type summaryJSON struct {
	Path      string         `json:"path"`
	Size      int64          `json:"size"`
	Kind      string         `json:"kind"`
	Runtime   string         `json:"runtime"`
	Header    *headerJSON    `json:"header,omitempty"`
	Records   int            `json:"records"`
	Counts    map[string]int `json:"counts,omitempty"`
	Bad       int            `json:"bad"`
	Unknown   int            `json:"unknown"`
	FirstTime uint64         `json:"first_time,omitempty"`
	LastTime  uint64         `json:"last_time,omitempty"`
	Symbols   int            `json:"symbols"`
	Reused    int            `json:"reused"`
	Largest   []symbolJSON   `json:"largest"`
	Problems  []problemJSON  `json:"problems"`
	Truncated *problemJSON   `json:"truncated"`
	Broken    *problemJSON   `json:"broken"`
	Forgotten int            `json:"forgotten"`
	Dropped   int            `json:"dropped"`
	ReadError string         `json:"read_error,omitempty"`
}

type headerJSON struct {
	BigEndian     bool   `json:"big_endian"`
	Version       uint32 `json:"version"`
	Size          uint32 `json:"size"`
	ElfMach       uint32 `json:"elf_mach"`
	Pid           uint32 `json:"pid"`
	Timestamp     uint64 `json:"timestamp"`
	Flags         uint64 `json:"flags"`
	ArchTimestamp bool   `json:"arch_timestamp"`
}

type symbolJSON struct {
	Start   uint64 `json:"start"`
	Size    uint64 `json:"size"`
	Name    string `json:"name"`
	Display string `json:"display"`
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Loaded  uint64 `json:"loaded,omitempty"`
}

type problemJSON struct {
	Offset int64  `json:"offset"`
	Line   int    `json:"line,omitempty"`
	Reason string `json:"reason"`
}

func problemOf(e *FormatError) *problemJSON {
	if e == nil {
		return nil
	}
	return &problemJSON{Offset: e.Offset, Line: e.Line, Reason: e.Reason}
}

func firstOnly(i int, label string) string {
	if i == 0 {
		return label
	}
	return ""
}

func spanOf(s *Summary, h Header) string {
	if h.ArchTimestamp() {
		return fmt.Sprintf("%d ticks", s.LastTime-s.FirstTime)
	}
	return time.Duration(s.LastTime - s.FirstTime).String()
}

func machName(m uint32) string {
	switch m {
	case 62:
		return " (x86-64)"
	case 183:
		return " (aarch64)"
	case 3:
		return " (i386)"
	case 40:
		return " (arm)"
	case 243:
		return " (riscv)"
	}
	return ""
}

// UnmarshalText reads what MarshalText wrote ("CODE_LOAD", or "record
// type 7" for ids this package does not know).
func (t *RecordType) UnmarshalText(b []byte) error {
	for c := RecordType(0); c < numRecordTypes; c++ {
		if c.String() == string(b) {
			*t = c
			return nil
		}
	}
	var n uint32
	if _, err := fmt.Sscanf(string(b), "record type %d", &n); err != nil {
		return fmt.Errorf("unknown record type %q", b)
	}
	*t = RecordType(n)
	return nil
}
