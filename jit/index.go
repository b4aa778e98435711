package jit

import (
	"cmp"
	"encoding/binary"
	"iter"
	"math"
	"slices"
)

// Symbol is one piece of JIT code.
type Symbol struct {
	Start, Size uint64
	Name        string // raw name as the runtime wrote it
	Display     string // DisplayName(...).Name: what people read
	File        string // source file, from CODE_DEBUG_INFO or the name
	Line        int
	CodeIndex   uint64
	Runtime     Runtime
	Source      string // the file it came from (path as found)
	Loaded      uint64 // CLOCK_MONOTONIC ns of the load (0 for perf maps)

	id int32 // in its Index, for LineAt
}

// End is the first address after the code.
func (s *Symbol) End() uint64 { return s.Start + s.Size }

// Contains reports whether addr is in the code.
func (s *Symbol) Contains(addr uint64) bool { return addr >= s.Start && addr-s.Start < s.Size }

// Index answers which JIT code was at an address, and when.
//
// Code loaded later over an address range hides what was there before
// from that moment on (a JIT freed the old code and reused the memory);
// a CODE_MOVE removes the code from its old range. Lookup gives the
// latest code at an address, LookupAt the code that was live at a
// CLOCK_MONOTONIC time. Jitdumps take precedence over perf maps, which
// carry no times: their later lines win.
//
// An Index never changes: a Process hands out a new one when its files
// grow, so an Index may be used from any number of goroutines.
type Index struct {
	layers [numLayers]layerView
	store  symbolStore
	under  []piece
	lines  []lineEntry
	files  []string
	// unwinds are the distinct unwinding infos of its symbols.
	unwinds []Unwinding
	n       int // symbols (tombstones included)
	live    int // symbols without tombstones
}

// Lookup returns the latest code at addr.
func (ix *Index) Lookup(addr uint64) (*Symbol, bool) { return ix.LookupAt(addr, math.MaxUint64) }

// LookupAt returns the code that was live at addr at time t
// (CLOCK_MONOTONIC nanoseconds, the clock of perf samples taken with
// use_clockid and of jitdump records).
func (ix *Index) LookupAt(addr, t uint64) (*Symbol, bool) {
	s, _, ok := ix.LookupSpan(addr, t)
	return s, ok
}

// Span is a stretch of time [From, Until) over which LookupSpan's answer
// at an address is the same: the code found (or none) was loaded at From
// and nothing loaded before Until covers the address; Until MaxUint64 is
// no end (the latest, math.MaxUint64, included). An Index never changes,
// so it holds for as long as the Index is the one asked: a caller may
// keep the answer for every time in it.
type Span struct {
	From, Until uint64
}

// Contains reports whether t is in the span.
func (sp Span) Contains(t uint64) bool {
	return t >= sp.From && (t < sp.Until || sp.Until == math.MaxUint64)
}

// LookupSpan is LookupAt, with the span of times that have the same
// answer at addr.
func (ix *Index) LookupSpan(addr, t uint64) (*Symbol, Span, bool) {
	span := Span{0, math.MaxUint64}
	if ix == nil {
		return nil, span, false
	}
	// Each layer knows of the code at addr what its source says; the one
	// whose answer came last before t is right (a JIT that registers its
	// code with the GDB interface and writes a jitdump too: the interface
	// frees code only when its list is read again, so new code in the
	// jitdump outranks old code the interface still lists). On a tie the
	// earlier layer answers: the interface's objects are where the code
	// is now. Every layer's span bounds the answer's: it holds while no
	// layer's answer changes.
	var found *Symbol
	decidedAny, at := false, uint64(0)
	for i := range ix.layers {
		s, sp, decided := ix.lookupLayer(&ix.layers[i], addr, t)
		span = Span{max(span.From, sp.From), min(span.Until, sp.Until)}
		if decided && (!decidedAny || sp.From > at) {
			found, decidedAny, at = s, true, sp.From
		}
	}
	return found, span, found != nil
}

// lookupLayer finds addr in one layer, and the span of times with the
// same answer. decided is false when the layer knew no code at addr at
// t, so that a later layer may answer.
func (ix *Index) lookupLayer(l *layerView, addr, t uint64) (_ *Symbol, _ Span, decided bool) {
	i := l.search(addr)
	if i < 0 || addr >= l.info[i].end {
		return nil, Span{0, math.MaxUint64}, false
	}
	// The common case answers from the view alone: the piece's code was
	// loaded by t. The symbol's own memory is not touched.
	if pi := &l.info[i]; pi.loaded <= t {
		if pi.tomb {
			return nil, Span{pi.loaded, math.MaxUint64}, true // moved away: nothing here any more
		}
		return &ix.store.slot(pi.id).sym, Span{pi.loaded, math.MaxUint64}, true
	}
	id := l.info[i].id
	covered := l.info[i].loaded // when code above the one looked at came
	for {
		sl := ix.store.slot(id)
		if sl.sym.Loaded <= t {
			span := Span{sl.sym.Loaded, covered}
			if sl.tomb {
				return nil, span, true
			}
			return &sl.sym, span, true
		}
		covered = sl.sym.Loaded
		// Loaded after t: look at what this code covered when it came.
		u := ix.under[sl.underOff : sl.underOff+sl.underLen]
		j := searchPieces(u, addr)
		if j < 0 {
			return nil, Span{0, covered}, false
		}
		id = u[j].id
	}
}

// Range is a stretch of addresses [Start, End).
type Range struct {
	Start, End uint64
}

// ChangedSince says how long the answers of an older Index of the same
// Process stay good: the address ranges where code was loaded, moved or
// freed (in any source: a jitdump's CODE_LOAD or CODE_MOVE, a perf map's
// new line, the GDB JIT interface's list gaining or losing an object)
// between old and ix, sorted and merged. Outside them every LookupSpan of
// ix gives old's answer and span, at any time. ok is false when ix is not
// old grown (its Process read a file again from its start, or compacted
// the index at its bound or after Forget): then any answer may have
// changed. A nil old is an empty index.
func (ix *Index) ChangedSince(old *Index) (changed []Range, ok bool) {
	if ix == old {
		return nil, true
	}
	if ix == nil {
		return nil, false
	}
	from := 0
	if old != nil && old.n > 0 {
		// Symbols keep their slots while their builder appends: a store
		// that starts elsewhere, or is shorter, is another builder's.
		if old.n > ix.n || len(ix.store.chunks) == 0 || &old.store.chunks[0][0] != &ix.store.chunks[0][0] {
			return nil, false
		}
		from = old.n
	}
	for id := from; id < ix.n; id++ {
		sym := &ix.store.slot(int32(id)).sym
		if sym.Size == 0 {
			continue
		}
		end := sym.End()
		if end < sym.Start {
			end = math.MaxUint64 // a hostile size: as far as addresses go
		}
		changed = append(changed, Range{sym.Start, end})
	}
	slices.SortFunc(changed, func(a, b Range) int { return cmp.Compare(a.Start, b.Start) })
	merged := changed[:0]
	for _, r := range changed {
		if n := len(merged); n > 0 && r.Start <= merged[n-1].End {
			merged[n-1].End = max(merged[n-1].End, r.End)
			continue
		}
		merged = append(merged, r)
	}
	return merged, true
}

// LineAt returns the source file and line of addr inside s, from the
// line table of its CODE_DEBUG_INFO record (kept with Options.LineTables):
// the line of the last entry at or before addr. ok is false when s has no
// table, does not hold addr, or is not from this index.
func (ix *Index) LineAt(s *Symbol, addr uint64) (file string, line int, ok bool) {
	if ix == nil || s == nil || s.id < 0 || int(s.id) >= ix.n || !s.Contains(addr) {
		return "", 0, false
	}
	sl := ix.store.slot(s.id)
	if &sl.sym != s || sl.linesLen == 0 {
		return "", 0, false
	}
	tab := ix.lines[sl.linesOff : sl.linesOff+sl.linesLen]
	off := addr - s.Start
	i, _ := slices.BinarySearchFunc(tab, off, func(e lineEntry, off uint64) int {
		if e.off <= off {
			return -1
		}
		return 1
	})
	if i == 0 {
		return "", 0, false // before the first entry
	}
	e := tab[i-1]
	return ix.files[e.file], int(e.line), true
}

// Unwinding returns the call frame information the runtime published for
// s's code (CODE_UNWINDING_INFO), if any: how to unwind through JIT code
// that keeps no frame pointer.
func (ix *Index) Unwinding(s *Symbol) (Unwinding, bool) {
	if ix == nil || s == nil || s.id < 0 || int(s.id) >= ix.n {
		return Unwinding{}, false
	}
	sl := ix.store.slot(s.id)
	if &sl.sym != s || sl.unwind <= 0 || int(sl.unwind) > len(ix.unwinds) {
		return Unwinding{}, false
	}
	return ix.unwinds[sl.unwind-1], true
}

// lineEntry maps an offset in a symbol's code to a source line.
type lineEntry struct {
	off  uint64
	line int32
	file uint32 // in Index.files
}

// Len is the number of symbols the index holds, old and new.
func (ix *Index) Len() int {
	if ix == nil {
		return 0
	}
	return ix.live
}

// All yields every symbol in the order it was read: load order within
// each file.
func (ix *Index) All() iter.Seq[*Symbol] {
	return func(yield func(*Symbol) bool) {
		if ix == nil {
			return
		}
		for id := 0; id < ix.n; id++ {
			sl := ix.store.slot(int32(id))
			if !sl.tomb && !yield(&sl.sym) {
				return
			}
		}
	}
}

// layer yields the symbols of one layer in load order.
func (ix *Index) layer(layer int) iter.Seq[*Symbol] {
	return func(yield func(*Symbol) bool) {
		for id := 0; ix != nil && id < ix.n; id++ {
			sl := ix.store.slot(int32(id))
			if !sl.tomb && int(sl.layer) == layer && !yield(&sl.sym) {
				return
			}
		}
	}
}

// searchPieces returns the index of the piece holding addr, or -1.
func searchPieces(ps []piece, addr uint64) int {
	lo, hi := 0, len(ps)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ps[m].start <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 || addr >= ps[lo-1].end {
		return -1
	}
	return lo - 1
}

// Layers in lookup order: the GDB JIT interface's objects, whose
// section headers are where the code is now, before the files.
const (
	layerGDB = iota
	layerJitdump
	layerPerfMap
	numLayers
)

// piece is part of a symbol's range that nothing loaded later covers.
type piece struct {
	start, end uint64
	id         int32
}

// layerView is a flat copy of a painter's pieces, sorted by address, for
// lookups. A lookup finds the region of code that holds the address (JIT
// code clusters in a few), reads that region's page table for the pieces
// that can hold it — usually one to four, in one cache line of starts —
// and answers from one pieceInfo: two or three memory reads where a
// binary search over all starts would make seventeen.
type layerView struct {
	regBase []uint64 // regions[i].base, searched first
	regions []viewRegion
	pages   []int32 // each region's page table, one after another
	starts  []uint64
	info    []pieceInfo
}

type viewRegion struct {
	base, limit uint64 // the region's pieces lie in [base, limit)
	shift       uint8  // a page is 1<<shift bytes
	first       int32  // the region's page 0 in pages
}

type pieceInfo struct {
	end    uint64
	loaded uint64 // the symbol's load time
	id     int32
	tomb   bool
}

const (
	// regionGap splits regions: pieces further apart start a new one.
	regionGap = 1 << 20
	// minPageShift is the smallest page; regions of sparse pieces get
	// larger pages, so that no region has more than about two pages per
	// piece.
	minPageShift = 8
)

// search returns the last i with starts[i] <= addr, or -1 when addr is
// in no region (then no piece can hold it).
func (l *layerView) search(addr uint64) int {
	lo, hi := 0, len(l.regBase)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.regBase[m] <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == 0 {
		return -1
	}
	rg := &l.regions[lo-1]
	if addr >= rg.limit {
		return -1
	}
	k := int(rg.first) + int((addr-rg.base)>>rg.shift)
	// Pieces before pages[k] end before the page; those after
	// pages[k+1] start after it.
	lo, hi = int(l.pages[k]), min(int(l.pages[k+1])+1, len(l.starts))
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l.starts[m] <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// buildView lays out pieces (sorted, not overlapping) for search.
func buildView(pieces []piece, store *symbolStore) layerView {
	n := len(pieces)
	v := layerView{starts: make([]uint64, n), info: make([]pieceInfo, n)}
	for i, q := range pieces {
		sl := store.slot(q.id)
		v.starts[i] = q.start
		v.info[i] = pieceInfo{end: q.end, loaded: sl.sym.Loaded, id: q.id, tomb: sl.tomb}
	}
	for i := 0; i < n; {
		j := i + 1
		for j < n && pieces[j].start-pieces[j-1].end <= regionGap {
			j++
		}
		v.addRegion(pieces, i, j)
		i = j
	}
	return v
}

// addRegion adds the region of pieces[i:j] and its page table.
func (v *layerView) addRegion(pieces []piece, i, j int) {
	rg := viewRegion{base: pieces[i].start, limit: pieces[j-1].end, shift: minPageShift, first: int32(len(v.pages))}
	span := rg.limit - 1 - rg.base
	for rg.shift < 63 && span>>rg.shift >= uint64(2*(j-i)+8) {
		rg.shift++
	}
	npages := int(span>>rg.shift) + 1
	at := i
	for k := 0; k <= npages; k++ { // one more: the end of the last page
		pageStart := rg.base + uint64(k)<<rg.shift
		if k == npages || pageStart < rg.base { // past the region (or wrapped)
			at = j
		}
		for at < j && pieces[at].end <= pageStart {
			at++
		}
		v.pages = append(v.pages, int32(at))
	}
	v.regBase = append(v.regBase, rg.base)
	v.regions = append(v.regions, rg)
}

// slot is a symbol with what the index needs to look beneath it.
type slot struct {
	sym Symbol
	// under[underOff:underOff+underLen] are the pieces this symbol
	// covered when it was loaded: where to look for earlier times.
	underOff, underLen uint32
	// lines[linesOff:linesOff+linesLen] is the symbol's line table.
	linesOff, linesLen uint32
	// unwind is 1 + the index of the symbol's unwinding info in
	// unwinds; 0: none.
	unwind int32
	// tomb marks the range a CODE_MOVE vacated.
	tomb  bool
	layer uint8
}

// symbolStore keeps slots in fixed-size chunks, so that a *Symbol handed
// out stays valid and no slot is ever copied or written after it is
// filled: indexes share the store while the builder appends.
type symbolStore struct {
	chunks [][]slot
}

const chunkBits = 10

func (s *symbolStore) slot(id int32) *slot {
	return &s.chunks[id>>chunkBits][id&(1<<chunkBits-1)]
}

// builder grows the index as records arrive. It is not safe for
// concurrent use; the Indexes it returns are.
type builder struct {
	store  symbolStore
	n      int
	live   int
	under  []piece
	lines  []lineEntry
	files  []string
	fileID map[string]uint32
	layers [numLayers]painter
	snap   *Index

	nameBytes int // of every symbol held (bound.go)
	reused    int // code loaded over code that was live, ever
	lost      map[string]*losses
	limits    limits // zero: defaultLimits
	// horizon is the earliest time lookups will still be made at
	// (Process.Forget): code replaced before it can go. looked is the
	// symbol count when forget last looked for such code.
	horizon uint64
	looked  int
	// unwinds are the distinct unwinding infos (a runtime writes the same
	// bytes for many pieces of code), unwindID finds them, unwindBytes
	// bounds them.
	unwinds     []Unwinding
	unwindID    map[string]int32
	unwindBytes int
}

// Unwinding is the call frame information a JIT published for a piece of
// code: a jitdump's CODE_UNWINDING_INFO, an .eh_frame whose addresses are
// relative to where it would lie after the code, and its .eh_frame_hdr;
// or a GDB JIT object's .eh_frame, relocated, which lies at Addr.
type Unwinding struct {
	EhFrame, EhFrameHdr []byte
	// Addr is where EhFrame lies in the target (0: after the code, as
	// a jitdump's).
	Addr uint64
}

// maxUnwindBytes bounds the unwinding infos one Index keeps.
const maxUnwindBytes = 16 << 20

// addUnwinding keeps the unwinding info of symbol id (just added); it
// reports false when the bound on their bytes was reached.
func (b *builder) addUnwinding(id int32, data []byte, hdrSize uint64) bool {
	if len(data) == 0 || hdrSize > uint64(len(data)) {
		return true
	}
	n, ok := b.unwindID[string(data)]
	if !ok {
		if b.unwindBytes+len(data) > maxUnwindBytes {
			return false
		}
		c := append([]byte(nil), data...)
		split := len(c) - int(hdrSize)
		b.unwinds = append(b.unwinds, Unwinding{EhFrame: c[:split:split], EhFrameHdr: c[split:]})
		n = int32(len(b.unwinds))
		if b.unwindID == nil {
			b.unwindID = map[string]int32{}
		}
		b.unwindID[string(c)] = n
		b.unwindBytes += len(c)
	}
	b.store.slot(id).unwind = n
	b.snap = nil
	return true
}

// addUnwindingAt keeps, for symbol id (just added), an .eh_frame that lies
// at addr in the target; false when the bound on their bytes was reached.
func (b *builder) addUnwindingAt(id int32, eh []byte, addr uint64) bool {
	if len(eh) == 0 {
		return true
	}
	key := string(binary.LittleEndian.AppendUint64(nil, addr)) + string(eh)
	n, ok := b.unwindID[key]
	if !ok {
		if b.unwindBytes+len(eh) > maxUnwindBytes {
			return false
		}
		b.unwinds = append(b.unwinds, Unwinding{EhFrame: append([]byte(nil), eh...), Addr: addr})
		n = int32(len(b.unwinds))
		if b.unwindID == nil {
			b.unwindID = map[string]int32{}
		}
		b.unwindID[key] = n
		b.unwindBytes += len(eh)
	}
	b.store.slot(id).unwind = n
	b.snap = nil
	return true
}

// add paints sym over what its range held before and returns its id.
func (b *builder) add(layer int, sym Symbol, tomb bool) int32 {
	if b.n>>chunkBits == len(b.store.chunks) {
		b.store.chunks = append(b.store.chunks, make([]slot, 1<<chunkBits))
	}
	id := int32(b.n)
	b.n++
	if !tomb {
		b.live++
	}
	sl := b.store.slot(id)
	sym.id = id
	sl.sym, sl.tomb, sl.layer = sym, tomb, uint8(layer)
	off := len(b.under)
	b.under = b.layers[layer].paint(b.under, id, sym.Start, sym.Start+sym.Size)
	sl.underOff, sl.underLen = uint32(off), uint32(len(b.under)-off)
	if !tomb && sl.underLen > 0 {
		b.reused++
	}
	b.nameBytes += symbolBytes(&sym)
	b.snap = nil
	return id
}

// addLines keeps the line table of symbol id (just added).
func (b *builder) addLines(id int32, tab []lineEntry) {
	if len(tab) == 0 {
		return
	}
	sl := b.store.slot(id)
	sl.linesOff, sl.linesLen = uint32(len(b.lines)), uint32(len(tab))
	b.lines = append(b.lines, tab...)
	b.snap = nil
}

// fileIndex returns the number of a source file name in the index.
func (b *builder) fileIndex(name string) uint32 {
	if i, ok := b.fileID[name]; ok {
		return i
	}
	if b.fileID == nil {
		b.fileID = make(map[string]uint32)
	}
	i := uint32(len(b.files))
	b.files = append(b.files, name)
	b.fileID[name] = i
	return i
}

// latest returns the newest symbol of layer at addr, as the builder
// stands (for CODE_MOVE, which names code by its address).
func (b *builder) latest(layer int, addr uint64) (*slot, bool) {
	id, ok := b.layers[layer].at(addr)
	if !ok {
		return nil, false
	}
	return b.store.slot(id), true
}

// index returns an immutable Index of everything added so far.
func (b *builder) index() *Index {
	if b.snap != nil {
		return b.snap
	}
	ix := &Index{store: symbolStore{chunks: slices.Clip(b.store.chunks)}, under: slices.Clip(b.under),
		lines: slices.Clip(b.lines), files: slices.Clip(b.files), n: b.n, live: b.live,
		unwinds: slices.Clip(b.unwinds)}
	for i := range b.layers {
		ix.layers[i] = b.layers[i].view(&b.store)
	}
	b.snap = ix
	return ix
}

// painter keeps the visible pieces of one layer: sorted, never
// overlapping, in runs of at most maxRun so that inserting in the middle
// of a large index moves little memory.
type painter struct {
	runs    [][]piece
	changed bool
	flat    layerView
}

const maxRun = 128

// find returns the position of the first piece that ends after addr.
func (p *painter) find(addr uint64) (ri, pi int) {
	// Runs are never empty; find the first whose last piece ends after
	// addr. JITs mostly load above everything loaded so far: check the
	// end first.
	n := len(p.runs)
	if n == 0 {
		return 0, 0
	}
	if last := p.runs[n-1]; last[len(last)-1].end <= addr {
		return n - 1, len(last)
	}
	lo, hi := 0, n-1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if run := p.runs[m]; run[len(run)-1].end <= addr {
			lo = m + 1
		} else {
			hi = m
		}
	}
	run := p.runs[lo]
	i, j := 0, len(run)
	for i < j {
		m := int(uint(i+j) >> 1)
		if run[m].end <= addr {
			i = m + 1
		} else {
			j = m
		}
	}
	return lo, i
}

func (p *painter) at(addr uint64) (int32, bool) {
	ri, pi := p.find(addr)
	if ri < len(p.runs) && pi < len(p.runs[ri]) && p.runs[ri][pi].start <= addr {
		return p.runs[ri][pi].id, true
	}
	return 0, false
}

// paint makes id visible over [start, end), appends the pieces it hides
// (clipped to the range) to under, and returns under.
func (p *painter) paint(under []piece, id int32, start, end uint64) []piece {
	if start >= end {
		return under
	}
	p.changed = true
	if len(p.runs) == 0 {
		p.runs = append(p.runs, append(make([]piece, 0, maxRun), piece{start, end, id}))
		return under
	}
	ri, pi := p.find(start)
	var buf [3]piece // left remnant, the new piece, right remnant
	repl := buf[:0]
	rj, pj := ri, pi
	for rj < len(p.runs) {
		if pj == len(p.runs[rj]) {
			if rj+1 == len(p.runs) {
				break
			}
			rj, pj = rj+1, 0
			continue
		}
		q := p.runs[rj][pj]
		if q.start >= end {
			break
		}
		if q.start < start {
			repl = append(repl, piece{q.start, start, q.id})
		}
		under = append(under, piece{max(q.start, start), min(q.end, end), q.id})
		if q.end > end {
			repl = append(repl, piece{end, q.end, q.id})
		}
		pj++
	}
	// Put the new piece between the left and right remnants.
	nw := piece{start, end, id}
	switch {
	case len(repl) > 0 && repl[0].start < start:
		repl = slices.Insert(repl, 1, nw)
	default:
		repl = slices.Insert(repl, 0, nw)
	}
	p.splice(ri, pi, rj, pj, repl)
	return under
}

// splice replaces the pieces from (ri, pi) up to (rj, pj) with repl.
func (p *painter) splice(ri, pi, rj, pj int, repl []piece) {
	if ri == rj {
		p.runs[ri] = slices.Replace(p.runs[ri], pi, pj, repl...)
	} else {
		p.runs[ri] = append(p.runs[ri][:pi], repl...)
		p.runs[rj] = p.runs[rj][pj:]
		drop := rj - ri - 1
		if len(p.runs[rj]) == 0 {
			drop++
		}
		p.runs = slices.Delete(p.runs, ri+1, ri+1+drop)
	}
	if run := p.runs[ri]; len(run) > maxRun {
		h := len(run) / 2
		right := append(make([]piece, 0, maxRun), run[h:]...)
		p.runs[ri] = run[:h]
		p.runs = slices.Insert(p.runs, ri+1, right)
	}
}

// view returns the flat arrays of the layer's pieces, rebuilt only when
// something was painted since the last call.
func (p *painter) view(store *symbolStore) layerView {
	if !p.changed {
		return p.flat
	}
	n := 0
	for _, run := range p.runs {
		n += len(run)
	}
	all := make([]piece, 0, n)
	for _, run := range p.runs {
		all = append(all, run...)
	}
	p.flat, p.changed = buildView(all, store), false
	return p.flat
}
