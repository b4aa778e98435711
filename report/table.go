package report

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"time"
	"unsafe"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/model"
)

// table is a profile's samples as columns — each distinct stack and
// label set once, each sample its stack, its label set, its end time and
// its values — and what every rendering of a capture reads: the pprof
// encoder, the findings' samples (Samples), the stacks of report.txt and
// report.html, and the page's data. A capture's is built once from its
// samples (buildTable), never as a profile.Profile with a Sample and a
// NumLabel map per sample to be read back; a profile read from a file
// is turned into one (tableOf), so that `stallwatch report` renders it
// the same way.
type table struct {
	// p holds the profile's header and its mappings, locations and
	// functions; its Sample is the profile's as read (tableOf), or nil
	// for a table built from samples until Profile materializes them.
	p *profile.Profile
	// stacks are the distinct location stacks, innermost first.
	stacks [][]*profile.Location
	// sets are the distinct label sets.
	sets []labelSet
	// Per sample.
	stack []int32
	set   []int32
	end   []int64 // end_timestamp_ns; 0 when the sample has none
	// values holds nv values per sample, in p.SampleType's order.
	values []int64
	nv     int
	// byEnd is the samples in end time order, ties in their order (made
	// once, for merging and for the page's timeline).
	byEnd []int32
}

// endOrder is the samples in end time order, ties in their order.
func (t *table) endOrder() []int32 {
	if t.byEnd == nil {
		t.byEnd = stableOrder(t.end)
	}
	return t.byEnd
}

// labelSet is a sample's string labels as the renderings read them, and
// the pprof Label map they came from or go to.
type labelSet struct {
	tid, pid    int
	tidText     string // the "thread id" label as written (it may not be a number)
	name, phase string
	offCPU      string // "blocked", "preempted" or ""
	m           map[string][]string
}

// len is the number of samples.
func (t *table) len() int { return len(t.stack) }

// value is sample i's value vi.
func (t *table) value(i, vi int) int64 { return t.values[i*t.nv+vi] }

// labels is sample i's label set.
func (t *table) labels(i int) *labelSet { return &t.sets[t.set[i]] }

// keepSets evaluates keep once per label set (nil: every set kept).
func (t *table) keepSets(keep func(*labelSet) bool) []bool {
	ok := make([]bool, len(t.sets))
	for i := range t.sets {
		ok[i] = keep == nil || keep(&t.sets[i])
	}
	return ok
}

// buildTable turns symbolized samples into a table with the capture
// contract's sample types and labels (BuildProfile's doc). Samples with
// the same stack, labels and end time merge; samples without an end time
// merge by stack and labels.
func buildTable(samples []model.Sample, meta model.Meta) (*table, error) {
	tb := NewTableBuilder(meta.Period, len(samples))
	for i := range samples {
		if err := tb.AddSample(&samples[i]); err != nil {
			return nil, err
		}
	}
	return tb.table(meta)
}

// TableBuilder builds a capture's table sample by sample, as SetSamples
// builds it from a slice: for a caller that has its samples one at a
// time and each distinct stack once (package capture resolves a stack
// once for all its samples), so that no slice of a hundred thousand
// samples is made only to be read back, and a stack is numbered once,
// not looked up again by its slice at every sample. Stacks are numbered
// in the order Stack first sees them, as buildTable numbers them in the
// order of their first samples: a caller that asks for a stack's id at
// its first sample builds the same table. After an error the builder is
// not to be used.
type TableBuilder struct {
	b      *builder
	t      *table
	labels labelSets
	period int64
	// untimed are the samples without an end time, by stack and label
	// set: they merge as they come; timed ones once all are in
	// (mergeSameEnd).
	untimed map[[2]int32]int32
	added   int // samples added, for errors
}

// NewTableBuilder starts a table whose samples stand for period
// nanoseconds of CPU time each where they say none (meta.Period of
// SetTable), with room for about samples samples.
func NewTableBuilder(period int64, samples int) *TableBuilder {
	samples = max(samples, 0)
	b := newBuilder()
	return &TableBuilder{
		b: b,
		t: &table{
			p:      b.p,
			stack:  make([]int32, 0, samples),
			set:    make([]int32, 0, samples),
			end:    make([]int64, 0, samples),
			values: make([]int64, 0, numValues*samples),
			nv:     numValues,
		},
		period:  period,
		untimed: map[[2]int32]int32{},
	}
}

// Stack is the id of a stack of frames, innermost first: the same
// frames give the same id, whatever slice holds them.
func (tb *TableBuilder) Stack(stack []*model.Location) (int32, error) {
	id, err := tb.b.stack(stack)
	if err != nil {
		return 0, tb.sampleErr(tb.added, 0, err)
	}
	return int32(id), nil
}

// AddSample adds a sample with its stack.
func (tb *TableBuilder) AddSample(s *model.Sample) error {
	if err := checkWeight(s); err != nil {
		return tb.sampleErr(tb.added, s.TID, err)
	}
	id, err := tb.b.stack(s.Stack)
	if err != nil {
		return tb.sampleErr(tb.added, s.TID, err)
	}
	return tb.Add(int32(id), s)
}

// Add adds a sample whose stack is the one Stack numbered stack; its own
// Stack is not read.
func (tb *TableBuilder) Add(stack int32, s *model.Sample) error {
	if s.Nanos < 0 || s.Count < 0 {
		tb.added++
		return tb.sampleErr(tb.added-1, s.TID, checkWeight(s))
	}
	return tb.AddWeight(stack, tb.Labels(s), s.Count, s.Nanos, s.EndNanos)
}

// Labels is the id of the label set of a sample: what its labels say
// (its thread, process, phase and kind), not its stack, weight or time.
func (tb *TableBuilder) Labels(s *model.Sample) int32 { return int32(tb.labels.of(s)) }

// AddWeight adds a sample of the stack Stack numbered stack and the
// label set Labels numbered set: count samples (0: one) of nanos
// nanoseconds (on the CPU, 0: count periods), ended at end (0: no time).
// It is Add of a sample whose fields it is given, for a caller that
// knows them alike sample after sample.
func (tb *TableBuilder) AddWeight(stack, set int32, count, nanos, end int64) error {
	i := tb.added
	tb.added++
	if set < 0 || int(set) >= len(tb.labels.keys) {
		return tb.sampleErr(i, 0, fmt.Errorf("label set %d of %d", set, len(tb.labels.keys)))
	}
	key := &tb.labels.keys[set]
	if nanos < 0 || count < 0 {
		return tb.sampleErr(i, key.tid, fmt.Errorf("negative weight (count %d, %d ns)", count, nanos))
	}
	if stack < 0 || int(stack) >= len(tb.b.stackLocs) {
		return tb.sampleErr(i, key.tid, fmt.Errorf("stack %d of %d", stack, len(tb.b.stackLocs)))
	}
	t := tb.t
	if end == 0 {
		k := [2]int32{stack, set}
		if j, ok := tb.untimed[k]; ok {
			var vals [numValues]int64
			putValues(vals[:], key.offCPU, count, nanos, tb.period)
			v := t.values[int(j)*numValues : int(j+1)*numValues]
			for k, x := range vals {
				v[k] += x
			}
			return nil
		}
		tb.untimed[k] = int32(len(t.stack))
	}
	t.stack = append(t.stack, stack)
	t.set = append(t.set, set)
	t.end = append(t.end, end)
	t.values = slices.Grow(t.values, numValues)
	n := len(t.values)
	t.values = t.values[:n+numValues]
	putValues(t.values[n:n+numValues], key.offCPU, count, nanos, tb.period)
	return nil
}

func (tb *TableBuilder) sampleErr(i, tid int, err error) error {
	return fmt.Errorf("report: sample %d (tid %d): %w", i, tid, err)
}

// table ends the build: the profile's header from meta, the timed
// samples merged, the mappings ordered.
func (tb *TableBuilder) table(meta model.Meta) (*table, error) {
	if meta.Period != tb.period {
		return nil, fmt.Errorf("report: a table built for a period of %d ns given a profile of %d", tb.period, meta.Period)
	}
	t := tb.t
	p := t.p
	p.SampleType = []*profile.ValueType{
		{Type: model.TypeCPUSamples, Unit: "count"},
		{Type: model.TypeCPUTime, Unit: "nanoseconds"},
		{Type: model.TypeOffCPUTime, Unit: "nanoseconds"},
		{Type: model.TypeWallTime, Unit: "nanoseconds"},
	}
	p.DefaultSampleType = model.TypeWallTime
	p.PeriodType = &profile.ValueType{Type: model.TypeCPUTime, Unit: "nanoseconds"}
	p.Period = meta.Period
	if !meta.Start.IsZero() {
		p.TimeNanos = meta.Start.UnixNano()
	}
	p.DurationNanos = int64(meta.Duration)
	p.Comments = append([]string(nil), meta.Comments...)
	t.mergeSameEnd()
	tb.b.finish()
	t.stacks = tb.b.stackLocs
	t.sets = tb.labels.sets
	if err := t.checkTables(); err != nil {
		return nil, err
	}
	return t, nil
}

// mergeSameEnd adds each timed sample into the first of the same end
// time, stack and labels, keeping the samples' order: the samples in end
// time order (stableOrder) are runs of one end time, mostly of one
// sample, looked at run by run — a recording's samples, whose end times
// are spread over the whole recording, would make any index by end time
// a cache miss per sample.
func (t *table) mergeSameEnd() {
	n := t.len()
	order := t.endOrder()
	var into []int32 // by sample: the sample it adds into, or -1
	for g := 0; g < n; {
		end := t.end[order[g]]
		h := g + 1
		for h < n && t.end[order[h]] == end {
			h++
		}
		if h-g > 1 && end != 0 {
			if into == nil {
				into = make([]int32, n)
				for i := range into {
					into[i] = -1
				}
			}
			t.mergeRun(order[g:h], into)
		}
		g = h
	}
	if into == nil {
		return
	}
	newIdx := make([]int32, n)
	k := 0
	for i := range n {
		j := into[i]
		if j < 0 {
			newIdx[i] = int32(k)
			t.stack[k], t.set[k], t.end[k] = t.stack[i], t.set[i], t.end[i]
			copy(t.values[k*t.nv:(k+1)*t.nv], t.values[i*t.nv:(i+1)*t.nv])
			k++
			continue
		}
		dst := t.values[int(newIdx[j])*t.nv : int(newIdx[j]+1)*t.nv]
		for v, x := range t.values[i*t.nv : (i+1)*t.nv] {
			dst[v] += x
		}
	}
	t.stack, t.set, t.end, t.values = t.stack[:k], t.set[:k], t.end[:k], t.values[:k*t.nv]
	// The order without the merged samples: still by end time, ties in
	// the samples' order.
	kept := order[:0]
	for _, i := range order {
		if into[i] < 0 {
			kept = append(kept, newIdx[i])
		}
	}
	t.byEnd = kept
}

// mergeRun finds, in a run of samples of one end time (in their order),
// the sample each merges into: the first of the same stack and labels.
func (t *table) mergeRun(run []int32, into []int32) {
	first := map[[2]int32]int32{}
	for _, i := range run {
		k := [2]int32{t.stack[i], t.set[i]}
		if j, ok := first[k]; ok {
			into[i] = j
		} else {
			first[k] = i
		}
	}
}

// checkTables checks what profile.CheckValid checks of the mappings,
// locations and functions (the samples refer to stacks built from them;
// the table's profile has no samples yet).
func (t *table) checkTables() error {
	if err := t.p.CheckValid(); err != nil {
		return fmt.Errorf("report: built an invalid profile: %w", err)
	}
	return nil
}

// Profile is the table as a profile.Profile: the one it was read from,
// or one made now with a pprof sample per table sample. Samples with the
// same labels share one Label map.
func (t *table) Profile() *profile.Profile {
	if t.p.Sample != nil {
		return t.p
	}
	n := t.len()
	slab := make([]profile.Sample, n)
	endSlab := make([]int64, n)
	p := t.p
	p.Sample = make([]*profile.Sample, n)
	for i := range n {
		s := &slab[i]
		s.Location = t.stacks[t.stack[i]]
		s.Value = t.values[i*t.nv : (i+1)*t.nv : (i+1)*t.nv]
		s.Label = t.sets[t.set[i]].m
		if e := t.end[i]; e != 0 {
			endSlab[i] = e
			s.NumLabel = map[string][]int64{model.LabelEndTime: endSlab[i : i+1 : i+1]}
		}
		p.Sample[i] = s
	}
	return p
}

// tableOf reads a profile (ours or another profiler's) into a table: its
// samples' stacks by their locations, their label sets by the labels the
// renderings read, their end_timestamp_ns.
func tableOf(p *profile.Profile) *table {
	n := len(p.Sample)
	t := &table{p: p, stack: make([]int32, n), set: make([]int32, n), end: make([]int64, n), nv: len(p.SampleType)}
	t.values = make([]int64, n*t.nv)
	stacks := map[string]int32{}
	var key []byte
	sets := map[readKey]int32{}
	byMap := map[unsafe.Pointer]int32{}
	for i, s := range p.Sample {
		key = key[:0]
		for _, l := range s.Location {
			key = binary.AppendUvarint(key, l.ID)
		}
		id, ok := stacks[string(key)]
		if !ok {
			id = int32(len(t.stacks))
			stacks[string(key)] = id
			t.stacks = append(t.stacks, s.Location)
		}
		t.stack[i] = id
		t.set[i] = t.setOf(s, sets, byMap)
		t.end[i], _ = numLabel(s, model.LabelEndTime)
		copy(t.values[i*t.nv:(i+1)*t.nv], s.Value)
	}
	return t
}

// setOf finds the label set of s: through its Label map when samples
// share them (BuildProfile's), else by what the renderings read.
func (t *table) setOf(s *profile.Sample, sets map[readKey]int32, byMap map[unsafe.Pointer]int32) int32 {
	var id unsafe.Pointer
	if len(s.Label) > 0 {
		id = mapIdentity(s.Label)
		if i, ok := byMap[id]; ok {
			return i
		}
	}
	ls := labelSet{
		tidText: label(s, model.LabelThreadID),
		name:    label(s, model.LabelThreadName),
		phase:   label(s, model.LabelPhase),
		offCPU:  label(s, model.LabelOffCPU),
		m:       s.Label,
	}
	ls.tid, _ = strconv.Atoi(ls.tidText)
	ls.pid, _ = strconv.Atoi(label(s, model.LabelProcessID))
	k := readKey{ls.tid, ls.pid, ls.tidText, ls.name, ls.phase, ls.offCPU}
	i, ok := sets[k]
	if !ok {
		i = int32(len(t.sets))
		sets[k] = i
		t.sets = append(t.sets, ls)
	}
	if id != nil {
		byMap[id] = i
	}
	return i
}

// readKey is what the renderings read of a sample's labels: samples
// alike in it are one label set.
type readKey struct {
	tid, pid                     int
	tidText, name, phase, offCPU string
}

// model reads the table's samples back into the capture model: what the
// findings are drawn from (Samples' doc).
func (t *table) model() *model.Profile {
	p := t.p
	mp := &model.Profile{
		Meta:   model.Meta{Duration: time.Duration(p.DurationNanos), Period: p.Period, Comments: p.Comments},
		OnCPU:  hasType(p, model.TypeCPUTime),
		OffCPU: hasType(p, model.TypeOffCPUTime),
	}
	if p.TimeNanos != 0 {
		mp.Start = time.Unix(0, p.TimeNanos).UTC()
	}
	conv := newLocConverter(false)
	for _, m := range p.Mapping {
		mp.Mappings = append(mp.Mappings, conv.mapping(m, locationKind(&profile.Location{Mapping: m})))
	}
	index := func(typ string) int {
		if i, err := valueIndex(p, typ); err == nil && hasType(p, typ) {
			return i
		}
		return -1
	}
	cpuI, offI, countI := index(model.TypeCPUTime), index(model.TypeOffCPUTime), index(model.TypeCPUSamples)
	value := func(s, i int) int64 {
		if i < 0 {
			return 0
		}
		return t.value(s, i)
	}
	// Samples of one stack share one slice of locations, as a capture's
	// do.
	stacks := make([][]*model.Location, len(t.stacks))
	for id, locs := range t.stacks {
		stack := make([]*model.Location, len(locs))
		for i, l := range locs {
			stack[i] = conv.location(l)
		}
		stacks[id] = stack
	}
	sums := newSampleSums(len(t.stacks), len(t.sets), t.len())
	for i := range t.len() {
		st, set := t.stack[i], t.set[i]
		lb := t.labels(i)
		cpu, off := value(i, cpuI), value(i, offI)
		if cpu > 0 || off == 0 && lb.offCPU == "" {
			n := value(i, countI)
			if n == 0 {
				n = 1 // as model.Sample reads 0, so that sums count it
			}
			if s := sums.add(st, set, false, n, cpu, t.end[i]); s != nil {
				*s = model.Sample{Stack: stacks[st], ThreadName: lb.name, Phase: lb.phase, TID: lb.tid, PID: lb.pid, Count: n, Nanos: cpu}
			}
		}
		if off > 0 || cpu == 0 && lb.offCPU != "" {
			if s := sums.add(st, set, true, 0, off, t.end[i]); s != nil {
				*s = model.Sample{Stack: stacks[st], ThreadName: lb.name, Phase: lb.phase, TID: lb.tid, PID: lb.pid,
					OffCPU: true, Preempted: lb.offCPU == "preempted", Nanos: off}
			}
		}
	}
	mp.Samples, mp.Spans = sums.out, sums.phaseSpans(t.sets)
	return mp
}

// sampleSums adds samples of one stack, label set and kind (on or off
// the CPU) into one, in the order of each one's first sample: what the
// findings read are sums by stack and thread, over a few thousand sums
// where a recording has a hundred thousand samples. The times the sums
// drop are kept as each label set's span.
type sampleSums struct {
	out   []model.Sample
	index slotIndex // by sumKey: the sum's index in out
	nsets uint64
	spans []model.Span // by label set
}

func newSampleSums(stacks, sets, samples int) *sampleSums {
	return &sampleSums{
		index: newSlotIndex(2*stacks*sets, max(samples, 1<<12)),
		nsets: uint64(sets),
		spans: make([]model.Span, sets),
	}
}

func (a *sampleSums) sumKey(stack, set int32, off bool) uint64 {
	k := (uint64(stack)*a.nsets + uint64(set)) * 2
	if off {
		k++
	}
	return k
}

// add adds a sample of count samples and nanos nanoseconds that ended at
// end (0: no time) into its sum. The sum of a sample first of its kind
// is the caller's to fill, whole: add gives it back.
func (a *sampleSums) add(stack, set int32, off bool, count, nanos, end int64) (first *model.Sample) {
	if end != 0 {
		a.spans[set].Add(end, nanos)
	}
	at, added := a.index.slot(a.sumKey(stack, set, off), len(a.out))
	if added {
		a.out = append(a.out, model.Sample{})
		return &a.out[at]
	}
	sum := &a.out[at]
	sum.Count += count
	sum.Nanos += nanos
	return nil
}

// phaseSpans is the span of each phase's samples.
func (a *sampleSums) phaseSpans(sets []labelSet) map[string]model.Span {
	out := map[string]model.Span{}
	for i, span := range a.spans {
		if span == (model.Span{}) {
			continue
		}
		ph := out[sets[i].phase]
		ph.Merge(span)
		out[sets[i].phase] = ph
	}
	return out
}

// slotIndex gives keys below a bound their slots, in the order they
// are first asked for (the caller's sums, in a slice): a slice by key
// where the keys are few enough, else a map.
type slotIndex struct {
	dense []int32 // by key: its slot plus one, 0 for none yet
	byKey map[uint64]int32
}

// newSlotIndex is an index of keys below n, a slice if n <= denseUpTo.
func newSlotIndex(n, denseUpTo int) slotIndex {
	if n <= denseUpTo {
		return slotIndex{dense: make([]int32, n)}
	}
	return slotIndex{byKey: map[uint64]int32{}}
}

// slot is key k's slot; a key without one is given next (added).
func (x *slotIndex) slot(k uint64, next int) (slot int, added bool) {
	var at int32
	if x.dense != nil {
		at = x.dense[k]
	} else {
		at = x.byKey[k]
	}
	if at != 0 {
		return int(at - 1), false
	}
	if x.dense != nil {
		x.dense[k] = int32(next + 1)
	} else {
		x.byKey[k] = int32(next + 1)
	}
	return next, true
}

// stableOrder is the order of keys, ascending, ties in their order: the
// indexes of keys, sorted. A recording's end times are time-ordered runs
// interleaved (one per CPU's ring), which a comparison sort takes n log n
// compares to undo; this is a radix sort of each key with its index
// packed below it (key<<24 | index), a pass per byte in which the keys
// differ (least significant first, so each pass keeps the order of the
// last and the packed indexes keep ties in order). Keys already in order
// are not sorted, and keys in a few sorted runs are merged (mergeRuns).
func stableOrder(keys []int64) []int32 {
	n := len(keys)
	out := make([]int32, n)
	if n == 0 {
		return out
	}
	lo, hi := keys[0], keys[0]
	descents := 0
	for i, k := range keys {
		lo, hi = min(lo, k), max(hi, k)
		if i > 0 && k < keys[i-1] {
			descents++
		}
	}
	if descents == 0 { // samples that came in time order need no sort
		for i := range out {
			out[i] = int32(i)
		}
		return out
	}
	if descents <= n/64 && mergeRuns(keys, out) {
		return out
	}
	const idxBits = 24
	span := uint64(hi - lo)
	if n >= 1<<idxBits || bits.Len64(span) > 64-idxBits {
		for i := range out {
			out[i] = int32(i)
		}
		slices.SortStableFunc(out, func(a, b int32) int { return cmp.Compare(keys[a], keys[b]) })
		return out
	}
	a, b := make([]uint64, n), make([]uint64, n)
	for i, k := range keys {
		a[i] = uint64(k-lo)<<idxBits | uint64(i)
	}
	for shift := idxBits; shift-idxBits < bits.Len64(span); shift += 8 {
		var count [256]int
		for _, v := range a {
			count[v>>shift&0xff]++
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for _, v := range a {
			d := v >> shift & 0xff
			b[count[d]] = v
			count[d]++
		}
		a, b = b, a
	}
	for i, v := range a {
		out[i] = int32(v & (1<<idxBits - 1))
	}
	return out
}

// mergeRuns puts into out the order of keys that come as sorted runs,
// each reaching back only into the tail of those before (a recording's
// rings, read a round at a time: BenchmarkEndToPprof's 102,511 end times
// are 28 runs): each run is merged into the order so far from where its
// first key goes, ties in their order. It gives up (false, out spoilt)
// where that would move more than 3 indexes per key: keys far from
// their order, which the radix sort sorts in fewer passes.
func mergeRuns(keys []int64, out []int32) bool {
	n := len(keys)
	budget := 3 * n
	var tail []int32
	done := 0 // out[:done] is the order of keys[:done]
	for done < n {
		end := done + 1
		for end < n && keys[end-1] <= keys[end] {
			end++
		}
		first := keys[done]
		at := sort.Search(done, func(i int) bool { return keys[out[i]] > first })
		if budget -= done - at + end - done; budget < 0 {
			return false
		}
		tail = append(tail[:0], out[at:done]...)
		w, a := at, 0
		for b := done; b < end; b++ {
			for a < len(tail) && keys[tail[a]] <= keys[b] {
				out[w] = tail[a]
				a, w = a+1, w+1
			}
			out[w] = int32(b)
			w++
		}
		copy(out[w:], tail[a:])
		done = end
	}
	return true
}
