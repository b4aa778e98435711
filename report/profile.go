package report

import (
	"encoding/binary"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"
	"github.com/klauspost/compress/gzip"

	"github.com/stallwatch/stallwatch/model"
)

// Value indexes of profile.pb.gz's sample types, in order.
const (
	valCPUSamples = iota
	valCPUTime
	valOffCPUTime
	valWallTime
	numValues
)

// BuildProfile turns symbolized samples into a pprof profile with the
// capture contract's sample types and labels. Identical stacks with
// identical labels are merged into one pprof sample (on- and off-CPU
// samples stay apart: their labels differ). The default sample type is
// wall-time, so
// `go tool pprof -top` shows where the threads spent the window, running
// or not. Samples with the same labels share one Label map: copy it before
// changing the labels of a single sample.
func BuildProfile(samples []model.Sample, meta model.Meta) (*profile.Profile, error) {
	t, err := buildTable(samples, meta)
	if err != nil {
		return nil, err
	}
	p := t.Profile()
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("report: built an invalid profile: %w", err)
	}
	return p, nil
}

// labelKey identifies the labels of a sample; samples with the same stack
// and labelKey merge into one pprof sample. On- and off-CPU samples stay
// apart so that a pprof sample is one or the other.
type labelKey struct {
	tid, pid  int
	name      string
	phase     string
	offCPU    bool
	preempted bool
}

// labelSets interns the labels of samples: one labelSet (and Label map)
// per labelKey, found through the thread id (a capture has a few sets per
// thread). The set of the sample before is compared first: a thread's
// samples come in runs.
type labelSets struct {
	byTID map[int][]int // tid → indexes of its sets
	keys  []labelKey
	sets  []labelSet
	last  int // the set of the sample before, if keys has it
}

func (l *labelSets) of(s *model.Sample) int {
	lk := labelKey{tid: s.TID, pid: s.PID, name: s.ThreadName, phase: s.Phase, offCPU: s.OffCPU, preempted: s.OffCPU && s.Preempted}
	if l.last < len(l.keys) && l.keys[l.last] == lk {
		return l.last
	}
	for _, i := range l.byTID[s.TID] {
		if l.keys[i] == lk {
			l.last = i
			return i
		}
	}
	if l.byTID == nil {
		l.byTID = map[int][]int{}
	}
	i := len(l.keys)
	l.byTID[s.TID] = append(l.byTID[s.TID], i)
	l.keys = append(l.keys, lk)
	ls := labelSet{tid: s.TID, pid: s.PID, tidText: strconv.Itoa(s.TID), name: s.ThreadName, phase: s.Phase, m: sampleLabels(s)}
	if s.OffCPU {
		ls.offCPU = ls.m[model.LabelOffCPU][0]
	}
	l.sets = append(l.sets, ls)
	l.last = i
	return i
}

// checkWeight refuses a sample of negative weight.
func checkWeight(s *model.Sample) error {
	if s.Nanos < 0 || s.Count < 0 {
		return fmt.Errorf("negative weight (count %d, %d ns)", s.Count, s.Nanos)
	}
	return nil
}

// putValues writes the values of a sample of count samples (0: one) and
// nanos nanoseconds (0: count periods, on the CPU), of weight checked
// (checkWeight), in the sample types' order into v.
func putValues(v []int64, off bool, count, nanos, period int64) {
	if off {
		v[valCPUSamples], v[valCPUTime], v[valOffCPUTime], v[valWallTime] = 0, 0, nanos, nanos
		return
	}
	if count == 0 {
		count = 1
	}
	if nanos == 0 {
		nanos = count * period
	}
	v[valCPUSamples], v[valCPUTime], v[valOffCPUTime], v[valWallTime] = count, nanos, 0, nanos
}

func sampleLabels(s *model.Sample) map[string][]string {
	l := map[string][]string{model.LabelThreadID: {strconv.Itoa(s.TID)}}
	if s.PID != 0 {
		l[model.LabelProcessID] = []string{strconv.Itoa(s.PID)}
	}
	if s.ThreadName != "" {
		l[model.LabelThreadName] = []string{s.ThreadName}
	}
	if s.Phase != "" {
		l[model.LabelPhase] = []string{s.Phase}
	}
	if s.OffCPU {
		if s.Preempted {
			l[model.LabelOffCPU] = []string{"preempted"}
		} else {
			l[model.LabelOffCPU] = []string{"blocked"}
		}
	}
	return l
}

// builder interns mappings, functions and locations of one profile.
type builder struct {
	p *profile.Profile

	byPtr     map[*model.Location]*profile.Location
	byValue   map[string]*profile.Location
	mappings  map[mappingKey]*profile.Mapping
	functions map[profile.Function]*profile.Function
	stacks    map[string]int
	stackLocs [][]*profile.Location
	slices    map[sliceKey]int
	// last is the slice of the sample before and its stack: samples of
	// one thread come in runs, often of one stack.
	last   sliceKey
	lastID int
	kernel *profile.Mapping // stands in for kernel locations without a mapping

	keyBuf, stackBuf []byte
}

type mappingKey struct {
	start, limit, offset uint64
	file, buildID        string
}

func newBuilder() *builder {
	return &builder{
		p:         &profile.Profile{},
		byPtr:     map[*model.Location]*profile.Location{},
		byValue:   map[string]*profile.Location{},
		mappings:  map[mappingKey]*profile.Mapping{},
		functions: map[profile.Function]*profile.Function{},
		stacks:    map[string]int{},
		slices:    map[sliceKey]int{},
	}
}

// locations converts a stack, reusing what earlier stacks converted.
func (b *builder) locations(stack []*model.Location) ([]*profile.Location, error) {
	out := make([]*profile.Location, len(stack))
	for i, sl := range stack {
		if sl == nil {
			return nil, fmt.Errorf("frame %d is nil", i)
		}
		out[i] = b.location(sl)
	}
	return out, nil
}

func (b *builder) location(sl *model.Location) *profile.Location {
	if l := b.byPtr[sl]; l != nil {
		return l
	}
	// Locations are shared by pointer, but the same code may arrive as
	// distinct values; the key includes the lines because a JIT can put
	// different functions at one address over time.
	m := b.mapping(sl)
	key := b.locationKey(m, sl)
	l := b.byValue[key]
	if l == nil {
		l = &profile.Location{
			ID:      uint64(len(b.p.Location) + 1),
			Mapping: m,
			Address: sl.Addr,
			Line:    b.lines(sl.Lines, sl.Addr),
		}
		b.p.Location = append(b.p.Location, l)
		b.byValue[key] = l
		b.noteMappingFacts(m, l)
	}
	b.byPtr[sl] = l
	return l
}

func (b *builder) locationKey(m *profile.Mapping, sl *model.Location) string {
	k := b.keyBuf[:0]
	if m != nil {
		k = strconv.AppendUint(k, m.ID, 16)
	}
	k = append(k, '|')
	k = strconv.AppendUint(k, sl.Addr, 16)
	for _, ln := range sl.Lines {
		k = append(k, '|')
		k = append(k, ln.Function...)
		k = append(k, 0)
		k = append(k, ln.SystemName...)
		k = append(k, 0)
		k = append(k, ln.File...)
		k = append(k, 0)
		k = strconv.AppendInt(k, ln.Line, 10)
	}
	b.keyBuf = k
	return string(k)
}

func (b *builder) lines(lines []model.Line, addr uint64) []profile.Line {
	if len(lines) == 0 {
		// The symbolizer promises a line; a location without one would
		// make pprof print a bare address, so name it the same way.
		lines = []model.Line{{Function: fmt.Sprintf("[unknown] %#x", addr)}}
	}
	out := make([]profile.Line, len(lines))
	for i, ln := range lines {
		out[i] = profile.Line{Function: b.function(ln), Line: ln.Line}
	}
	return out
}

func (b *builder) function(ln model.Line) *profile.Function {
	name := ln.Function
	if name == "" {
		name = ln.SystemName
	}
	sys := ln.SystemName
	if sys == "" {
		sys = name
	}
	k := profile.Function{Name: name, SystemName: sys, Filename: ln.File}
	if f := b.functions[k]; f != nil {
		return f
	}
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: sys, Filename: ln.File}
	b.functions[k] = f
	b.p.Function = append(b.p.Function, f)
	return f
}

func (b *builder) mapping(sl *model.Location) *profile.Mapping {
	sm := sl.Mapping
	if sm == nil {
		if sl.Kind != model.KindKernel {
			return nil
		}
		return b.kernelMapping(sl.Addr)
	}
	file := sm.File
	if file == "" && (sm.Kind == model.KindKernel || sl.Kind == model.KindKernel) {
		file = model.KernelMapping
	}
	k := mappingKey{sm.Start, sm.Limit, sm.Offset, file, sm.BuildID}
	if m := b.mappings[k]; m != nil {
		return m
	}
	m := &profile.Mapping{
		ID:              uint64(len(b.p.Mapping) + 1),
		Start:           sm.Start,
		Limit:           sm.Limit,
		Offset:          sm.Offset,
		File:            file,
		BuildID:         sm.BuildID,
		HasFunctions:    sm.HasFunctions,
		HasFilenames:    sm.HasFilenames,
		HasLineNumbers:  sm.HasLineNumbers,
		HasInlineFrames: sm.HasInlineFrames,
	}
	b.mappings[k] = m
	b.p.Mapping = append(b.p.Mapping, m)
	return m
}

// kernelMapping is the one mapping of kernel locations that came without
// one; it grows to cover their addresses.
func (b *builder) kernelMapping(addr uint64) *profile.Mapping {
	if b.kernel == nil {
		b.kernel = &profile.Mapping{ID: uint64(len(b.p.Mapping) + 1), Start: addr, Limit: addr + 1, File: model.KernelMapping}
		b.p.Mapping = append(b.p.Mapping, b.kernel)
	}
	b.kernel.Start = min(b.kernel.Start, addr)
	if addr >= b.kernel.Limit && addr != ^uint64(0) {
		b.kernel.Limit = addr + 1
	}
	return b.kernel
}

// noteMappingFacts sets a mapping's Has* flags from what its locations
// carry. Every location arrives named (symbolization happened at capture
// time, against the target's own files), so HasFunctions is always set:
// otherwise `go tool pprof` would re-symbolize against whatever file of
// that path the reader's machine has, or complain that it has none.
func (b *builder) noteMappingFacts(m *profile.Mapping, l *profile.Location) {
	if m == nil {
		return
	}
	m.HasFunctions = true
	if len(l.Line) > 1 {
		m.HasInlineFrames = true
	}
	for _, ln := range l.Line {
		if ln.Function.Filename != "" {
			m.HasFilenames = true
		}
		if ln.Line > 0 {
			m.HasLineNumbers = true
		}
	}
}

// stack interns a stack: the same frames give the same id, and their
// pprof locations are converted once.
func (b *builder) stack(stack []*model.Location) (int, error) {
	// Samples often share one stack slice (the capture interns stacks);
	// all samples are in hand, so one backing array and length is one
	// stack, and the frames need no second look.
	if len(stack) == 0 {
		return b.stackByFrames(stack)
	}
	sk := sliceKey{&stack[0], len(stack)}
	if sk == b.last {
		return b.lastID, nil
	}
	id, ok := b.slices[sk]
	if !ok {
		var err error
		if id, err = b.stackByFrames(stack); err != nil {
			return 0, err
		}
		b.slices[sk] = id
	}
	b.last, b.lastID = sk, id
	return id, nil
}

// sliceKey identifies a stack slice by its backing array and length.
type sliceKey struct {
	first **model.Location
	n     int
}

func (b *builder) stackByFrames(stack []*model.Location) (int, error) {
	k := b.stackBuf[:0]
	for i, sl := range stack {
		if sl == nil {
			return 0, fmt.Errorf("frame %d is nil", i)
		}
		k = binary.AppendUvarint(k, b.location(sl).ID)
	}
	b.stackBuf = k
	if id, ok := b.stacks[string(k)]; ok {
		return id, nil
	}
	locs := make([]*profile.Location, len(stack))
	for i, sl := range stack {
		locs[i] = b.byPtr[sl]
	}
	id := len(b.stackLocs)
	b.stacks[string(k)] = id
	b.stackLocs = append(b.stackLocs, locs)
	return id, nil
}

// finish orders mappings by address, as /proc/<pid>/maps lists them, so
// that pprof's guess of the main binary (the first mapping that is not a
// library or a pseudo file) finds the executable, and renumbers them.
func (b *builder) finish() {
	sort.SliceStable(b.p.Mapping, func(i, j int) bool {
		mi, mj := b.p.Mapping[i], b.p.Mapping[j]
		ki, kj := isPseudo(mi.File), isPseudo(mj.File)
		if ki != kj {
			return !ki
		}
		return mi.Start < mj.Start
	})
	for i, m := range b.p.Mapping {
		m.ID = uint64(i + 1)
	}
}

func isPseudo(file string) bool { return file == "" || strings.HasPrefix(file, "[") }

// WriteProfile writes p gzipped, as profile.pb.gz. It trades a slightly
// larger file for a compressor several times faster than the default
// level, since the profile is written on the capture's critical path:
// klauspost/compress's gzip at its fastest level, 4x faster than the
// standard library's BestSpeed on a capture's profile for the same size
// (6.7 vs 27 ms for memory-reclaim's 970 KB, 199 KB either way), which
// was the capture end's largest single cost.
func WriteProfile(w io.Writer, p *profile.Profile) error {
	return writeEncoded(w, encodeProfile(nil, p))
}

// writeTableGzip writes a table as profile.pb.gz, encoding it as it
// compresses (WriteProfile's doc).
func writeTableGzip(w io.Writer, t *table) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	if err := writeTable(zw, t); err != nil {
		return err
	}
	return zw.Close()
}

// writeEncoded gzips an encoded profile to w (WriteProfile's doc).
func writeEncoded(w io.Writer, pb []byte) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	if _, err := zw.Write(pb); err != nil {
		return err
	}
	return zw.Close()
}
