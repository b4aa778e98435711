package jit

import (
	"cmp"
	"slices"
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
	s.convert = opts.ConvertTSC
	size, err := s.size()
	if err != nil {
		return nil, err
	}
	sum := &Summary{Path: path, Size: size}
	var b builder
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
			s.record(&b, r)
		})
		s.sync()
		sum.Header = s.dump.hdr
		sum.Counts = map[RecordType]int{}
		for t, n := range s.dump.counts {
			sum.Counts[RecordType(t)] = n
		}
	} else {
		err = s.ingest(&b, true)
	}
	if err != nil {
		return nil, err
	}
	sum.Info = s.info
	ix := b.index()
	sum.Symbols = ix.Len()
	for id := 0; id < ix.n; id++ {
		if sl := ix.store.slot(int32(id)); !sl.tomb && sl.underLen > 0 {
			sum.Reused++
		}
	}
	for sym := range ix.All() {
		sum.Largest = append(sum.Largest, *sym)
	}
	slices.SortStableFunc(sum.Largest, func(a, b Symbol) int { return cmp.Compare(b.Size, a.Size) })
	sum.Largest = slices.Clip(sum.Largest[:min(len(sum.Largest), largestCount)])
	return sum, nil
}
