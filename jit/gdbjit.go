package jit

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/objfile"
)

// The GDB JIT interface (GDB's manual, "JIT Compilation Interface"): a JIT
// that wants debuggers to see its code keeps, at the exported symbol
// __jit_debug_descriptor, a descriptor
//
//	struct jit_descriptor { uint32_t version; uint32_t action_flag;
//	    struct jit_code_entry *relevant_entry, *first_entry; };
//
// heading a doubly linked list of
//
//	struct jit_code_entry { struct jit_code_entry *next_entry, *prev_entry;
//	    const char *symfile_addr; uint64_t symfile_size; };
//
// each naming an object file in memory. LLVM's MCJIT and ORC register
// every object they load (lli; PostgreSQL's llvmjit with
// jit_debugging_support; Julia): relocatable ELF files whose section
// headers say where the code went, with symbols and .eh_frame (package
// objfile, JITObject). The list is read from the target's memory without
// stopping it; everything in it is untrusted: the walk is bounded, every
// pointer is a read that may fail, and an object is parsed by code that is
// fuzzed.

// Memory reads a process's memory.
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// Bounds on what the interface may make stallwatch read.
const (
	gdbVersion    = 1
	maxGDBEntries = 1 << 16  // entries walked
	maxGDBObject  = 64 << 20 // bytes of one object
	// maxGDBReadBytes bounds the objects' bytes one read of the list
	// reads (what is left is read the next time).
	maxGDBReadBytes = 64 << 20
	// gdbChunk is how much of an object is read at once: an object is
	// held only as far as the target's memory holds it, whatever size
	// its entry claims.
	gdbChunk = 64 << 10
)

// gdbEntry is one registered object: where it lies in the target.
type gdbEntry struct{ addr, size uint64 }

// ErrGDBVersion is a descriptor whose version this reader does not know.
var ErrGDBVersion = errors.New("not version 1 of the GDB JIT interface")

// readGDBList walks the list of the descriptor at desc.
func readGDBList(mem Memory, desc uint64) ([]gdbEntry, error) {
	return readGDBEntries(mem, desc, nil)
}

// readGDBEntries walks the list of the descriptor at desc from its head,
// up to the first entry known says was read (nil: to its end).
func readGDBEntries(mem Memory, desc uint64, known map[gdbEntry]bool) ([]gdbEntry, error) {
	var d [24]byte
	if _, err := mem.ReadAt(d[:], desc); err != nil {
		return nil, fmt.Errorf("__jit_debug_descriptor at %#x: %w", desc, err)
	}
	if v := binary.LittleEndian.Uint32(d[:]); v != gdbVersion {
		return nil, fmt.Errorf("__jit_debug_descriptor at %#x: version %d: %w", desc, v, ErrGDBVersion)
	}
	var out []gdbEntry
	seen := map[uint64]bool{}
	for at := binary.LittleEndian.Uint64(d[16:]); at != 0; {
		if seen[at] {
			return out, fmt.Errorf("jit_code_entry at %#x: the list loops back to it", at)
		}
		if len(out) == maxGDBEntries {
			return out, fmt.Errorf("more than %d jit_code_entry records: the rest not read", maxGDBEntries)
		}
		seen[at] = true
		var e [32]byte
		if _, err := mem.ReadAt(e[:], at); err != nil {
			// The JIT may be unlinking this entry as we read.
			return out, fmt.Errorf("jit_code_entry at %#x: %w", at, err)
		}
		entry := gdbEntry{binary.LittleEndian.Uint64(e[16:]), binary.LittleEndian.Uint64(e[24:])}
		if known != nil && known[entry] {
			break
		}
		if entry.addr != 0 && entry.size != 0 {
			out = append(out, entry)
		}
		at = binary.LittleEndian.Uint64(e[:])
	}
	return out, nil
}

// gdbSource follows the GDB JIT interface of a process into the index:
// each object's functions, with its call frame information.
//
// The interface says nothing of when code was loaded, and a JIT frees
// code and loads other code at the same addresses (PostgreSQL does for
// every query). LLVM's JITs put each object they register at the list's
// head, so a look at the list tells that the objects it finds before the
// first one read were registered after the look before (which would have
// found them), and a read of the whole list that an object it no longer
// finds was freed since. So an object is taken as loaded just after the
// look before the one that finds it (or always, when the first read of
// all finds it: it was there before stallwatch looked): the samples taken
// in its code between its registration and its reading — all those a
// reader that wakes every few milliseconds, or later on a loaded host,
// holds when it looks — are its. Where it lies over an object the same
// read found freed, the two cannot be told apart over that time (the old
// code ran until some moment in it, the new from a later one); there the
// old object stays until the read, and the new one is loaded at it. A
// freed object whose code a live one now covers is not marked freed
// there: the live one, loaded after it, answers.
//
// The unwinder asks for a look as samples newer than the last one arrive
// (ReadGDBJIT), and for the head at once when such a sample meets code the
// index does not have (ReadGDBJITHead); while it asks, a goroutine looks
// when no walk did for gdbFollowEvery, so that looks keep their pace when
// the sampler's reader falls behind: the list's head, at most once per gdbHeadGap — the descriptor
// and the entries up to the first one read, two small reads when nothing
// was registered — and the whole list, for what was freed, at most once
// per gdbReadGap and per gdbEntryGap of each entry it had: a JIT with
// thousands of objects (Julia) has its list read whole about once a
// second, not fifty times.
type gdbSource struct {
	info SourceInfo
	mem  Memory
	desc uint64
	now  func() uint64 // CLOCK_MONOTONIC
	// done are the objects read (or that could not be, which are not
	// tried again); live the functions of those in the list at the last
	// read, to be marked freed when they leave it.
	done  map[gdbEntry]bool
	live  map[gdbEntry][]objfile.JITFunc
	reads int
	// maxRead bounds the bytes one ingest reads (maxGDBReadBytes).
	maxRead int64
	// last is when the whole list was last read, and entries how many it
	// had; looked when the list was last looked at, whole or its head.
	last, looked uint64
	entries      int
	// For ReadGDBJIT: when it was last called, the builder's count it
	// last reported, and the goroutine that looks at the list every
	// follow while it is called (none for 0), until followIdle after
	// the last call.
	asked              uint64
	reported           int
	follow, followIdle time.Duration
	following          bool
}

// How often, and for how long after the unwinder last asked, the list is
// looked at by a goroutine of its own (Process.followGDB).
const (
	gdbFollowEvery = 5 * time.Millisecond
	gdbFollowMax   = 40 * time.Millisecond // while walks look on their own
	gdbFollowIdle  = 5 * time.Second
)

// gdbHeadGap bounds how often the list's head is looked at between reads
// of the whole list.
const gdbHeadGap = uint64(time.Millisecond)

// gdbEntryGap is how long a whole read of the list waits after the last,
// per entry that one read: reads of entries stay under 5,000 a second.
const gdbEntryGap = uint64(200 * time.Microsecond)

func newGDBSource(mem Memory, desc uint64) *gdbSource {
	return &gdbSource{mem: mem, desc: desc, now: monotime.Now, done: map[gdbEntry]bool{}, live: map[gdbEntry][]objfile.JITFunc{}, maxRead: maxGDBReadBytes,
		follow: gdbFollowEvery, followIdle: gdbFollowIdle,
		info: SourceInfo{Path: fmt.Sprintf("__jit_debug_descriptor at %#x", desc), Kind: KindGDBJIT, How: "memory"}}
}

// reset forgets what was read, for a rebuilt index.
func (g *gdbSource) reset() {
	g.done, g.live, g.reads = map[gdbEntry]bool{}, map[gdbEntry][]objfile.JITFunc{}, 0
	g.info.Records, g.info.Symbols, g.info.Bad, g.info.Bytes = 0, 0, 0, 0
	g.info.Problems = nil
}

// wholeGap is how long after the last read of the whole list the next
// may be: minGap, or longer for a long list.
func (g *gdbSource) wholeGap(minGap uint64) uint64 {
	return max(minGap, uint64(g.entries)*gdbEntryGap)
}

// look reads into b what a sample newer than the last look needs
// (ReadGDBJIT): the whole list when minGap (wholeGap) has passed since it
// was last read, else its head once gdbHeadGap has passed since the last
// look. whole says which; err is the whole read's.
func (g *gdbSource) look(b *builder, minGap uint64) (whole bool, err error) {
	switch now := g.now(); {
	case now-g.last >= g.wholeGap(minGap):
		return true, g.ingest(b)
	case now-g.looked >= gdbHeadGap:
		g.ingestHead(b)
	}
	return false, nil
}

// ingest reads the whole list: the objects registered since the last look
// into b, and those that left it marked freed.
func (g *gdbSource) ingest(b *builder) error {
	t := g.now()
	entries, err := readGDBList(g.mem, g.desc)
	loaded := g.since()
	g.reads++
	g.last, g.looked, g.entries = t, t, len(entries)
	var freed []jitRange
	if err == nil {
		freed = g.freeGone(b, entries, t)
	}
	g.readObjects(b, entries, loaded, freed, t)
	g.syncLosses(b)
	return err
}

// ingestHead reads the objects at the list's head that were not read,
// the ones registered since the last look. A head that cannot be read
// says nothing: the next whole read will.
func (g *gdbSource) ingestHead(b *builder) {
	t := g.now()
	entries, _ := readGDBEntries(g.mem, g.desc, g.done)
	loaded := g.since()
	g.looked = t
	g.readObjects(b, entries, loaded, nil, t)
	g.syncLosses(b)
}

// since is when an object a look finds now was registered after: the
// look before (0 for the first of all: what was there before stallwatch
// looked has been since ever).
func (g *gdbSource) since() uint64 {
	if g.reads == 0 {
		return 0
	}
	return g.looked + 1
}

// readObjects reads the objects of entries not read yet into b, as loaded
// at loaded, or at t where they lie over code freed (the sorted ranges
// of the objects this look found gone).
func (g *gdbSource) readObjects(b *builder, entries []gdbEntry, loaded uint64, freed []jitRange, t uint64) {
	read := int64(0)
	var scratch [gdbChunk]byte
	for _, e := range entries {
		if g.done[e] {
			continue
		}
		if e.size > maxGDBObject {
			g.done[e] = true
			g.problem(e, fmt.Sprintf("%d bytes, more than the %d an object may have", e.size, maxGDBObject))
			continue
		}
		if read+int64(e.size) > g.maxRead {
			break // the rest at the next call
		}
		g.done[e] = true
		read += int64(e.size)
		img, err := g.readObject(e, scratch[:])
		if err != nil {
			g.problem(e, err.Error())
			continue
		}
		g.info.Records++
		g.info.Bytes += int64(e.size)
		obj, err := objfile.ParseJITObject(fmt.Sprintf("JIT object at %#x", e.addr), img)
		if err != nil {
			g.problem(e, err.Error())
			continue
		}
		if obj.Problem != "" {
			g.problem(e, obj.Problem)
		}
		at := loaded
		if overlapsAny(obj.Funcs, freed) {
			at = t // over code freed since the look before: from now
		}
		g.add(b, obj, at)
		g.live[e] = obj.Funcs
	}
}

// readObject reads the object of entry e a chunk at a time, through
// scratch: what it holds grows only with what the memory gave.
func (g *gdbSource) readObject(e gdbEntry, scratch []byte) ([]byte, error) {
	var img []byte
	for off := uint64(0); off < e.size; {
		n := min(uint64(len(scratch)), e.size-off)
		if _, err := g.mem.ReadAt(scratch[:n], e.addr+off); err != nil {
			return nil, fmt.Errorf("object at %#x, %d bytes: %w", e.addr, e.size, err)
		}
		img = append(img, scratch[:n]...)
		off += n
	}
	return img, nil
}

// freeGone marks the functions of the objects that left the list (the
// JIT freed their code) gone from time t on, but where a live object's
// code now lies, and returns their ranges, sorted.
func (g *gdbSource) freeGone(b *builder, entries []gdbEntry, t uint64) []jitRange {
	in := make(map[gdbEntry]bool, len(entries))
	for _, e := range entries {
		in[e] = true
	}
	var gone []objfile.JITFunc
	for e, funcs := range g.live {
		if in[e] {
			continue
		}
		gone = append(gone, funcs...)
		delete(g.live, e)
		delete(g.done, e) // the same bytes at the same place may come back
	}
	if len(gone) == 0 {
		return nil
	}
	var live []jitRange
	for _, funcs := range g.live {
		live = appendRanges(live, funcs)
	}
	sortRanges(live)
	freed := appendRanges(nil, gone)
	for _, f := range gone {
		if !overlaps(f, live) {
			b.add(layerGDB, Symbol{Start: f.Start, Size: f.Size, Source: g.info.Path, Loaded: t}, true)
		}
	}
	sortRanges(freed)
	return freed
}

func appendRanges(dst []jitRange, funcs []objfile.JITFunc) []jitRange {
	for _, f := range funcs {
		dst = append(dst, jitRange{f.Start, f.Start + f.Size})
	}
	return dst
}

func sortRanges(r []jitRange) {
	slices.SortFunc(r, func(a, b jitRange) int { return cmp.Compare(a.lo, b.lo) })
}

// jitRange is the code range [lo, hi) of a function.
type jitRange struct{ lo, hi uint64 }

// overlapsAny reports whether any of funcs overlaps a range of sorted.
func overlapsAny(funcs []objfile.JITFunc, sorted []jitRange) bool {
	return slices.ContainsFunc(funcs, func(f objfile.JITFunc) bool { return overlaps(f, sorted) })
}

// overlaps reports whether f overlaps a range of sorted.
func overlaps(f objfile.JITFunc, sorted []jitRange) bool {
	// The first range ending after f starts is the only one that can
	// overlap it first.
	i, _ := slices.BinarySearchFunc(sorted, f.Start, func(r jitRange, start uint64) int { return cmp.Compare(r.hi, start+1) })
	return i < len(sorted) && sorted[i].lo < f.Start+f.Size
}

// add indexes an object's functions, with its .eh_frame, as loaded at
// time loaded.
func (g *gdbSource) add(b *builder, obj *objfile.JITObject, loaded uint64) {
	for _, f := range obj.Funcs {
		rt := detectRuntime(f.Name)
		if rt == RuntimeUnknown {
			rt = RuntimeLLVM // the interface's writers here are LLVM's JITs
		}
		dn := DisplayName(rt, f.Name)
		sym := Symbol{Start: f.Start, Size: f.Size, Name: f.Name, Display: dn.Name, File: dn.File, Line: dn.Line,
			Runtime: rt, Source: g.info.Path, Loaded: loaded}
		id := b.add(layerGDB, sym, false)
		g.info.Symbols++
		g.info.Runtime = rt
		if obj.CFI != nil {
			b.addUnwindingAt(id, obj.EhFrame, obj.EhFrameAddr)
		}
		b.bound()
	}
}

// problem notes a defect of the object e.
func (g *gdbSource) problem(e gdbEntry, why string) {
	g.info.Bad++
	if len(g.info.Problems) < maxProblems {
		g.info.Problems = append(g.info.Problems, &FormatError{File: g.info.Path, Offset: int64(e.addr), Reason: "object at " + fmt.Sprintf("%#x", e.addr) + ": " + why})
	}
}

func (g *gdbSource) syncLosses(b *builder) {
	if l := b.lost[g.info.Path]; l != nil {
		g.info.Forgotten, g.info.Dropped = l.forgotten, l.dropped
	}
}
