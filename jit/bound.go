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

// bound compacts the builder when it has passed its bound: only the code
// live now is kept (what later code replaced is forgotten); if the live
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
	nb := &builder{limits: b.limits, lost: b.lost, reused: b.reused}
	if nb.lost == nil {
		nb.lost = map[string]*losses{}
	}
	kept := live[len(live)-keep:]
	for _, id := range live[:len(live)-keep] {
		nb.loss(b.store.slot(id).sym.Source).dropped++
	}
	isLive := make([]bool, b.n)
	for _, id := range live {
		isLive[id] = true
	}
	for id := int32(0); id < int32(b.n); id++ {
		if sl := b.store.slot(id); !isLive[id] && !sl.tomb {
			nb.loss(sl.sym.Source).forgotten++
		}
	}
	for _, id := range kept {
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
