package jit

import "slices"

// The memory bound of an Index (the package doc, "Memory"). A jitdump is
// written by the target and may be as large as its writer likes — a
// long-running runtime appends every compilation forever, and a hostile
// one can write millions of tiny records — so an Index never holds more
// than this, whatever the files say.
const (
	// MaxSymbols bounds the code ranges an Index holds, replaced code
	// included.
	MaxSymbols = 1 << 18
	// MaxNameBytes bounds the bytes of their names (raw, display and
	// source file names).
	MaxNameBytes = 64 << 20
	// MaxLineEntries bounds the entries of their line tables.
	MaxLineEntries = 1 << 21
	// maxNameLen cuts a single name: no JIT writes longer ones, and a
	// record may hold a megabyte of "name".
	maxNameLen = 4 << 10
)

// limits are the bounds a builder keeps to; tests shrink them.
type limits struct {
	symbols, nameBytes, lines int
}

var defaultLimits = limits{MaxSymbols, MaxNameBytes, MaxLineEntries}

// inspectLimits bound Inspect, which needs no names to answer lookups:
// only the live code, to count code loaded over code.
var inspectLimits = limits{MaxSymbols / 2, MaxNameBytes / 8, MaxLineEntries / 8}

// losses count, per symbol file, what the bound cost.
type losses struct {
	// forgotten are replaced code ranges (no longer live) dropped when
	// the index was compacted: lookups at times before the compaction
	// may miss them.
	forgotten int
	// dropped are live code ranges dropped, oldest first, when the live
	// code alone passed three quarters of the bound.
	dropped int
	// retired are replaced code ranges no lookup could find any more:
	// replaced before the horizon (Process.Forget). Not a loss.
	retired int
}

// over reports whether the builder has passed its bound.
func (b *builder) over() bool {
	l := b.lim()
	return b.n > l.symbols || b.nameBytes > l.nameBytes || len(b.lines) > l.lines
}

func (b *builder) lim() limits {
	if b.limits == (limits{}) {
		return defaultLimits
	}
	return b.limits
}

// bound compacts the builder when it has passed its bound: the code live
// now is kept, and the replaced code a lookup at or after the horizon may
// still need (Process.Forget) when that fits in three quarters of the
// bound; else every piece of replaced code is forgotten and, if the live
// code alone is over three quarters of the bound, the oldest of it is
// dropped too, so that the next compaction is a quarter of the bound of
// new code away (each symbol is copied at most four times on average).
// Indexes handed out before keep what they hold. Callers call it between
// records; it changes symbol ids.
func (b *builder) bound() {
	if !b.over() {
		return
	}
	live := b.liveIDs()
	l := b.lim()
	retired := func(int32) bool { return false }
	if b.horizon > 0 {
		var recent []int32
		recent, retired = b.deadSince(live, b.horizon)
		keep := mergeIDs(live, recent)
		if b.fits(keep, l) {
			b.rebuild(keep, func(nb *builder, sl *slot) { nb.loss(sl.sym.Source).retired++ }, retired)
			return
		}
	}
	keep, names, lines := len(live), 0, 0
	for i := len(live) - 1; i >= 0; i-- { // newest first
		sl := b.store.slot(live[i])
		names += symbolBytes(&sl.sym)
		lines += int(sl.linesLen)
		if len(live)-i > l.symbols*3/4 || names > l.nameBytes*3/4 || lines > l.lines*3/4 {
			keep = len(live) - 1 - i
			break
		}
	}
	kept := live[len(live)-keep:]
	isKept := make([]bool, b.n)
	for _, id := range kept {
		isKept[id] = true
	}
	isLive := make([]bool, b.n)
	for _, id := range live {
		isLive[id] = true
	}
	b.rebuild(kept, func(nb *builder, sl *slot) {
		switch {
		case isLive[sl.sym.id]:
			nb.loss(sl.sym.Source).dropped++
		case retired(sl.sym.id):
			nb.loss(sl.sym.Source).retired++ // no lookup can need it
		default:
			nb.loss(sl.sym.Source).forgotten++
		}
	}, func(id int32) bool { return !isKept[id] })
}

// retireEvery is how much new code Forget waits for before it looks for
// code to retire again (or a quarter of what the index holds, if more):
// a look costs a pass over every symbol.
var retireEvery = 4096

// forget retires the code that later code had replaced before horizon
// (CLOCK_MONOTONIC ns): no lookup at or after it can find that code, and
// the caller says none will be made before it (continuous profiling has
// resolved every sample taken before). The index is rebuilt when that
// frees a quarter of it or retireEvery symbols, and looked at again once
// as much new code came; so the index of a runtime that keeps replacing
// its code holds the code live now and what was replaced since the
// horizon, not everything it ever compiled.
func (b *builder) forget(horizon uint64) {
	if horizon <= b.horizon {
		return
	}
	b.horizon = horizon
	if b.n-b.looked < max(retireEvery, b.looked/4) {
		return
	}
	b.looked = b.n
	live := b.liveIDs()
	recent, retired := b.deadSince(live, horizon)
	n := len(live) + len(recent)
	if b.n-n < max(retireEvery, b.n/4) {
		return
	}
	b.rebuild(mergeIDs(live, recent), func(nb *builder, sl *slot) { nb.loss(sl.sym.Source).retired++ }, retired)
	b.looked = b.n
}

// deadSince splits the code no longer live: the ids that were still live
// at or after horizon (some lookup may find them), and a test of those
// that were not.
func (b *builder) deadSince(live []int32, horizon uint64) (recent []int32, retired func(int32) bool) {
	isLive := make([]bool, b.n)
	for _, id := range live {
		isLive[id] = true
	}
	deaths := b.deaths()
	for id := int32(0); id < int32(b.n); id++ {
		if !isLive[id] && deaths[id] >= horizon {
			recent = append(recent, id)
		}
	}
	return recent, func(id int32) bool { return !isLive[id] && deaths[id] < horizon }
}

// deaths gives each symbol the moment its last visible piece was covered:
// the latest load time of the code loaded over it (0 for code nothing
// covered, and for perf map lines, which carry no time).
func (b *builder) deaths() []uint64 {
	d := make([]uint64, b.n)
	for id := int32(0); id < int32(b.n); id++ {
		sl := b.store.slot(id)
		for _, p := range b.under[sl.underOff : sl.underOff+sl.underLen] {
			d[p.id] = max(d[p.id], sl.sym.Loaded)
		}
	}
	return d
}

// fits reports whether the symbols keep stay within three quarters of
// the bound.
func (b *builder) fits(keep []int32, l limits) bool {
	names, lines := 0, 0
	for _, id := range keep {
		sl := b.store.slot(id)
		names += symbolBytes(&sl.sym)
		lines += int(sl.linesLen)
	}
	return len(keep) <= l.symbols*3/4 && names <= l.nameBytes*3/4 && lines <= l.lines*3/4
}

// mergeIDs merges two sorted lists of ids.
func mergeIDs(a, c []int32) []int32 {
	out := make([]int32, 0, len(a)+len(c))
	out = append(append(out, a...), c...)
	slices.Sort(out)
	return out
}

// rebuild replaces b with a builder of the symbols keep (sorted: load
// order) alone, painted again in that order with their line tables and
// unwinding infos; count is told of each symbol (tombstones of moved code
// aside) that gone says is left out.
func (b *builder) rebuild(keep []int32, count func(nb *builder, sl *slot), gone func(int32) bool) {
	nb := &builder{limits: b.limits, lost: b.lost, reused: b.reused, horizon: b.horizon}
	if nb.lost == nil {
		nb.lost = map[string]*losses{}
	}
	for id := int32(0); id < int32(b.n); id++ {
		if sl := b.store.slot(id); !sl.tomb && gone(id) {
			count(nb, sl)
		}
	}
	for _, id := range keep {
		sl := b.store.slot(id)
		nid := nb.add(int(sl.layer), sl.sym, sl.tomb)
		if sl.linesLen > 0 {
			tab := b.lines[sl.linesOff : sl.linesOff+sl.linesLen]
			moved := make([]lineEntry, len(tab))
			for i, e := range tab {
				e.file = nb.fileIndex(b.files[e.file])
				moved[i] = e
			}
			nb.addLines(nid, moved)
		}
		if sl.unwind > 0 {
			u := b.unwinds[sl.unwind-1]
			nb.addUnwinding(nid, append(append([]byte(nil), u.EhFrame...), u.EhFrameHdr...), uint64(len(u.EhFrameHdr)))
		}
	}
	nb.reused = b.reused // add counted the kept ones again
	nb.looked = nb.n
	*b = *nb
}

// liveIDs are the ids of the symbols (and vacated ranges) some part of
// which is visible now in some layer, in load order.
func (b *builder) liveIDs() []int32 {
	seen := make([]bool, b.n)
	var ids []int32
	for i := range b.layers {
		for _, run := range b.layers[i].runs {
			for _, p := range run {
				if !seen[p.id] {
					seen[p.id] = true
					ids = append(ids, p.id)
				}
			}
		}
	}
	slices.Sort(ids)
	return ids
}

func (b *builder) loss(source string) *losses {
	if b.lost == nil {
		b.lost = map[string]*losses{}
	}
	l, ok := b.lost[source]
	if !ok {
		l = &losses{}
		b.lost[source] = l
	}
	return l
}

// symbolBytes is what a symbol's names cost.
func symbolBytes(s *Symbol) int { return len(s.Name) + len(s.Display) + len(s.File) }

// cutName keeps a name within maxNameLen bytes, on a character boundary.
func cutName(name []byte) []byte {
	if len(name) <= maxNameLen {
		return name
	}
	n := maxNameLen
	for n > 0 && name[n]&0xc0 == 0x80 {
		n--
	}
	return name[:n]
}
