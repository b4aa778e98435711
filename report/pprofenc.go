package report

import (
	"encoding/binary"
	"io"
	"math/bits"
	"reflect"
	"slices"
	"sort"
	"unsafe"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/model"
)

// encodeProfile writes p as pprof's protobuf message (profile.proto),
// uncompressed, appended to dst. It says what profile.Profile's own
// encoder says — a profile that decodes to the same Profile — in a pass
// over the samples that costs little per sample: a capture's 100,000
// samples share a few dozen Label maps (one per thread, phase and kind),
// whose encoded labels are made once each, and carry one numeric label
// (end_timestamp_ns) each, encoded without sorting a map's keys per
// sample (the library's encoder sorted both maps' keys for every sample:
// most of the 0.14 CPU-s it took per capture end).
func encodeProfile(dst []byte, p *profile.Profile) []byte {
	if dst == nil {
		// A capture's sample is about 100 bytes: room for them all,
		// not a buffer copied as it doubles.
		dst = make([]byte, 0, 128*len(p.Sample)+64*len(p.Location)+4096)
	}
	e := &pbEncoder{b: dst, strs: map[string]int64{"": 0}, table: []string{""}}
	for _, st := range p.SampleType {
		e.valueType(1, st)
	}
	labels := map[unsafe.Pointer][]byte{}
	var ids []uint64
	var vals []uint64
	var keys []string
	for _, s := range p.Sample {
		e.begin(2)
		ids = ids[:0]
		for _, l := range s.Location {
			ids = append(ids, l.ID)
		}
		e.packed(1, ids)
		vals = vals[:0]
		for _, v := range s.Value {
			vals = append(vals, uint64(v))
		}
		e.packed(2, vals)
		if len(s.Label) > 0 {
			id := mapIdentity(s.Label)
			enc, ok := labels[id]
			if !ok {
				enc = e.stringLabels(s.Label, &keys)
				labels[id] = enc
			}
			e.b = append(e.b, enc...)
		}
		if len(s.NumLabel) == 1 && len(s.NumUnit) == 0 {
			for k, vs := range s.NumLabel {
				kx := e.str(k)
				for _, v := range vs {
					e.numLabel(kx, v, 0)
				}
			}
		} else if len(s.NumLabel) > 0 {
			keys = sortedKeys(keys[:0], s.NumLabel)
			for _, k := range keys {
				kx := e.str(k)
				units := s.NumUnit[k]
				for i, v := range s.NumLabel[k] {
					var ux int64
					if i < len(units) {
						ux = e.str(units[i])
					}
					e.numLabel(kx, v, ux)
				}
			}
		}
		e.end()
	}
	return e.tables(p)
}

// encodeTable writes a table as pprof's protobuf message, as
// encodeProfile writes t.Profile(), without making it: each stack's
// location ids and each label set's labels are encoded once, and a
// sample is its stack's bytes, its values, its labels' bytes and its end
// time, its length summed from theirs (sample).
func encodeTable(dst []byte, t *table) []byte {
	if dst == nil {
		dst = make([]byte, 0, 96*t.len()+64*len(t.p.Location)+4096)
	}
	e := &pbEncoder{b: dst, strs: map[string]int64{"": 0}, table: []string{""}}
	return e.encodeTable(t)
}

// writeTable writes encodeTable's bytes to w as they are made, a
// spillBytes at a time: the compressor reads each while it is in the
// cache, and no buffer of the whole profile is made (10 MB a capture).
func writeTable(w io.Writer, t *table) error {
	e := &pbEncoder{b: make([]byte, 0, 2*spillBytes), strs: map[string]int64{"": 0}, table: []string{""}, w: w}
	b := e.encodeTable(t)
	if e.err != nil {
		return e.err
	}
	_, err := w.Write(b)
	return err
}

// spillBytes is how much of the encoding writeTable holds before it
// writes.
const spillBytes = 64 << 10

// spill writes what is encoded to the encoder's writer, if it has one,
// once there is spillBytes of it and no message is open.
func (e *pbEncoder) spill() {
	if e.w == nil || len(e.b) < spillBytes || len(e.open) > 0 || e.err != nil {
		return
	}
	_, e.err = e.w.Write(e.b)
	e.b = e.b[:0]
}

func (e *pbEncoder) encodeTable(t *table) []byte {
	p := t.p
	for _, st := range p.SampleType {
		e.valueType(1, st)
	}
	stackEnc := make([][]byte, len(t.stacks))
	var ids []uint64
	for id, locs := range t.stacks {
		ids = ids[:0]
		for _, l := range locs {
			ids = append(ids, l.ID)
		}
		start := len(e.b)
		e.packed(1, ids)
		stackEnc[id] = append([]byte(nil), e.b[start:]...)
		e.b = e.b[:start]
	}
	var keys []string
	setEnc := make([][]byte, len(t.sets))
	for i := range t.sets {
		if m := t.sets[i].m; len(m) > 0 {
			setEnc[i] = e.stringLabels(m, &keys)
		}
	}
	endKey := uint64(e.str(model.LabelEndTime))
	var vals []byte
	var last []int64 // the values vals encodes: most samples repeat them
	for i := range t.len() {
		if v := t.values[i*t.nv : (i+1)*t.nv]; last == nil || !slices.Equal(v, last) {
			vals, last = appendVarints(vals[:0], v), v
		}
		e.sample(stackEnc[t.stack[i]], vals, setEnc[t.set[i]], endKey, t.end[i])
		e.spill()
	}
	return e.tables(p)
}

// sample appends a Sample message from its parts, as begin, packed,
// numLabel and end would write it, byte for byte: its stack's location
// ids (field 1, encoded), its values (field 2's varints), its string
// labels (encoded) and its end_timestamp_ns label (none when end is 0).
// Its length is known from the parts before it is written, so none of a
// capture's hundred thousand samples opens and closes a message.
func (e *pbEncoder) sample(stack, vals, labels []byte, endKey uint64, end int64) {
	// label{key: endKey, num: end}: two keys of a byte each.
	var num [2*binary.MaxVarintLen64 + 2]byte
	nl := 0
	if end != 0 {
		num[0] = 1<<3 | wireVarint
		nl = 1 + binary.PutUvarint(num[1:], endKey)
		num[nl] = 3<<3 | wireVarint
		nl++
		nl += binary.PutUvarint(num[nl:], uint64(end))
	}
	n := len(stack) + len(labels)
	if len(vals) > 0 {
		n += 1 + varintLen(uint64(len(vals))) + len(vals)
	}
	if nl > 0 {
		n += 1 + varintLen(uint64(nl)) + nl
	}
	// Appended to a local slice grown once: the encoder's own would be
	// loaded and stored at every append.
	b := slices.Grow(e.b, 1+binary.MaxVarintLen64+n)
	b = append(b, 2<<3|wireBytes)
	b = binary.AppendUvarint(b, uint64(n))
	b = append(b, stack...)
	if len(vals) > 0 {
		b = append(b, 2<<3|wireBytes)
		b = binary.AppendUvarint(b, uint64(len(vals)))
		b = append(b, vals...)
	}
	b = append(b, labels...)
	if nl > 0 {
		b = append(b, 3<<3|wireBytes)
		b = binary.AppendUvarint(b, uint64(nl))
		b = append(b, num[:nl]...)
	}
	e.b = b
}

// appendVarints appends vs as varints, as packed writes them.
func appendVarints(dst []byte, vs []int64) []byte {
	for _, v := range vs {
		dst = binary.AppendUvarint(dst, uint64(v))
	}
	return dst
}

func varintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// tables writes the mappings, locations, functions, the string table and
// the profile's header fields after the samples.
func (e *pbEncoder) tables(p *profile.Profile) []byte {
	for _, m := range p.Mapping {
		e.begin(3)
		e.uint64(1, m.ID)
		e.uint64(2, m.Start)
		e.uint64(3, m.Limit)
		e.uint64(4, m.Offset)
		e.int64(5, e.str(m.File))
		e.int64(6, e.str(m.BuildID))
		e.bool(7, m.HasFunctions)
		e.bool(8, m.HasFilenames)
		e.bool(9, m.HasLineNumbers)
		e.bool(10, m.HasInlineFrames)
		e.end()
	}
	for _, l := range p.Location {
		e.begin(4)
		e.uint64(1, l.ID)
		if l.Mapping != nil {
			e.uint64(2, l.Mapping.ID)
		}
		e.uint64(3, l.Address)
		for i := range l.Line {
			ln := &l.Line[i]
			e.begin(4)
			if ln.Function != nil {
				e.uint64(1, ln.Function.ID)
			}
			e.int64(2, ln.Line)
			e.int64(3, ln.Column)
			e.end()
		}
		e.bool(5, l.IsFolded)
		e.end()
		e.spill()
	}
	for _, f := range p.Function {
		e.begin(5)
		e.uint64(1, f.ID)
		e.int64(2, e.str(f.Name))
		e.int64(3, e.str(f.SystemName))
		e.int64(4, e.str(f.Filename))
		e.int64(5, f.StartLine)
		e.end()
		e.spill()
	}
	// The strings of the fields after the table are interned before it
	// is written: the table comes last of the indexed things.
	drop, keep := e.str(p.DropFrames), e.str(p.KeepFrames)
	var periodType [2]int64
	if pt := p.PeriodType; pt != nil {
		periodType = [2]int64{e.str(pt.Type), e.str(pt.Unit)}
	}
	comments := make([]uint64, len(p.Comments))
	for i, c := range p.Comments {
		comments[i] = uint64(e.str(c))
	}
	defaultType, docURL := e.str(p.DefaultSampleType), e.str(p.DocURL)
	for _, s := range e.table {
		e.key(6, wireBytes)
		e.varint(uint64(len(s)))
		e.b = append(e.b, s...)
		e.spill()
	}
	e.int64(7, drop)
	e.int64(8, keep)
	e.int64(9, p.TimeNanos)
	e.int64(10, p.DurationNanos)
	if periodType != [2]int64{} {
		e.begin(11)
		e.int64(1, periodType[0])
		e.int64(2, periodType[1])
		e.end()
	}
	e.int64(12, p.Period)
	e.packed(13, comments)
	e.int64(14, defaultType)
	e.int64(15, docURL)
	return e.b
}

// mapIdentity is a map's identity: Label maps shared by samples are
// encoded once.
func mapIdentity(m map[string][]string) unsafe.Pointer {
	return reflect.ValueOf(m).UnsafePointer()
}

// stringLabels encodes a sample's string labels, keys in order, as the
// library does.
func (e *pbEncoder) stringLabels(m map[string][]string, keys *[]string) []byte {
	*keys = sortedKeys((*keys)[:0], m)
	start := len(e.b)
	for _, k := range *keys {
		kx := e.str(k)
		for _, v := range m[k] {
			e.begin(3)
			e.int64(1, kx)
			e.int64(2, e.str(v))
			e.end()
		}
	}
	enc := append([]byte(nil), e.b[start:]...)
	e.b = e.b[:start]
	return enc
}

func (e *pbEncoder) numLabel(key, num, unit int64) {
	e.begin(3)
	e.int64(1, key)
	e.int64(3, num)
	e.int64(4, unit)
	e.end()
}

func sortedKeys[V any](dst []string, m map[string]V) []string {
	for k := range m {
		dst = append(dst, k)
	}
	sort.Strings(dst)
	return dst
}

func (e *pbEncoder) valueType(field int, vt *profile.ValueType) {
	e.begin(field)
	e.int64(1, e.str(vt.Type))
	e.int64(2, e.str(vt.Unit))
	e.end()
}

// pbEncoder appends protobuf fields to b; messages nest with begin and
// end, which make room for the length before the message and close the
// gap after it (most messages are shorter than 128 bytes: one byte).
type pbEncoder struct {
	b     []byte
	open  []int // where each open message's body starts
	strs  map[string]int64
	table []string
	// w, when set, takes what is encoded as it goes (spill); err is its
	// first error.
	w   io.Writer
	err error
}

const (
	wireVarint = 0
	wireBytes  = 2
)

func (e *pbEncoder) key(field, wire int) { e.varint(uint64(field)<<3 | uint64(wire)) }

func (e *pbEncoder) varint(v uint64) {
	for v >= 0x80 {
		e.b = append(e.b, byte(v)|0x80)
		v >>= 7
	}
	e.b = append(e.b, byte(v))
}

// uint64, int64 and bool write a field that is not its zero value, as
// proto3 does.
func (e *pbEncoder) uint64(field int, v uint64) {
	if v != 0 {
		e.key(field, wireVarint)
		e.varint(v)
	}
}

func (e *pbEncoder) int64(field int, v int64) { e.uint64(field, uint64(v)) }

func (e *pbEncoder) bool(field int, v bool) {
	if v {
		e.uint64(field, 1)
	}
}

// packed writes a packed repeated varint field.
func (e *pbEncoder) packed(field int, vs []uint64) {
	if len(vs) == 0 {
		return
	}
	e.begin(field)
	for _, v := range vs {
		e.varint(v)
	}
	e.end()
}

func (e *pbEncoder) begin(field int) {
	e.key(field, wireBytes)
	e.b = append(e.b, 0) // one byte of length, widened by end if need be
	e.open = append(e.open, len(e.b))
}

func (e *pbEncoder) end() {
	start := e.open[len(e.open)-1]
	e.open = e.open[:len(e.open)-1]
	n := len(e.b) - start
	if n < 0x80 {
		e.b[start-1] = byte(n)
		return
	}
	// Widen the length: move the body up by the extra bytes.
	var lb [10]byte
	w := 0
	for v := uint64(n); ; v >>= 7 {
		if v < 0x80 {
			lb[w] = byte(v)
			w++
			break
		}
		lb[w] = byte(v) | 0x80
		w++
	}
	e.b = append(e.b, make([]byte, w-1)...)
	copy(e.b[start+w-1:], e.b[start:start+n])
	copy(e.b[start-1:], lb[:w])
}

// str interns s in the string table.
func (e *pbEncoder) str(s string) int64 {
	if i, ok := e.strs[s]; ok {
		return i
	}
	i := int64(len(e.table))
	e.strs[s] = i
	e.table = append(e.table, s)
	return i
}
