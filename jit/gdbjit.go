package jit

import (
	"encoding/binary"
	"errors"
	"fmt"

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
		addr, size := binary.LittleEndian.Uint64(e[16:]), binary.LittleEndian.Uint64(e[24:])
		if addr != 0 && size != 0 {
			out = append(out, gdbEntry{addr, size})
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
// every query). An object is taken as loaded when a read first finds it
// (or always, when the first read of all finds it: it was there before
// stallwatch looked) and as freed when a read finds it gone; reading the
// list costs a few small reads, and the unwinder has it read again as
// samples of JIT code newer than the last read arrive (ReadGDBJIT), so
// that the time between a load and its reading stays short.
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
	// last is when the list was last read.
	last uint64
}

func newGDBSource(mem Memory, desc uint64) *gdbSource {
	return &gdbSource{mem: mem, desc: desc, now: monotime.Now, done: map[gdbEntry]bool{}, live: map[gdbEntry][]objfile.JITFunc{}, maxRead: maxGDBReadBytes,
		info: SourceInfo{Path: fmt.Sprintf("__jit_debug_descriptor at %#x", desc), Kind: KindGDBJIT, How: "memory"}}
}

// reset forgets what was read, for a rebuilt index.
func (g *gdbSource) reset() {
	g.done, g.live, g.reads = map[gdbEntry]bool{}, map[gdbEntry][]objfile.JITFunc{}, 0
	g.info.Records, g.info.Symbols, g.info.Bad, g.info.Bytes = 0, 0, 0, 0
	g.info.Problems = nil
}

// ingest reads the objects registered since the last call into b, and
// marks those that left the list freed.
func (g *gdbSource) ingest(b *builder) error {
	t := g.now()
	entries, err := readGDBList(g.mem, g.desc)
	loaded := t
	if g.reads == 0 {
		loaded = 0 // registered before stallwatch looked: since ever
	}
	g.reads++
	g.last = t
	if err == nil {
		g.freeGone(b, entries, t)
	}
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
		g.add(b, obj, loaded)
		g.live[e] = obj.Funcs
	}
	g.syncLosses(b)
	return err
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
// JIT freed their code) gone from time t on.
func (g *gdbSource) freeGone(b *builder, entries []gdbEntry, t uint64) {
	in := make(map[gdbEntry]bool, len(entries))
	for _, e := range entries {
		in[e] = true
	}
	for e, funcs := range g.live {
		if in[e] {
			continue
		}
		for _, f := range funcs {
			b.add(layerGDB, Symbol{Start: f.Start, Size: f.Size, Source: g.info.Path, Loaded: t}, true)
		}
		delete(g.live, e)
		delete(g.done, e) // the same bytes at the same place may come back
	}
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
