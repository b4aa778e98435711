package jit

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// SourceKind is the format of a symbol file.
type SourceKind uint8

const (
	KindJitdump SourceKind = iota + 1 // jit-<pid>.dump
	KindPerfMap                       // perf-<pid>.map
	KindGDBJIT                        // the GDB JIT interface, in memory
)

func (k SourceKind) String() string {
	switch k {
	case KindJitdump:
		return "jitdump"
	case KindPerfMap:
		return "perfmap"
	case KindGDBJIT:
		return "gdb-jit"
	}
	return "unknown"
}

// MarshalText makes kinds readable in JSON.
func (k SourceKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// SourceInfo describes one symbol file of a process: where it was found,
// what was read from it and what was wrong with it.
type SourceInfo struct {
	// Path is the file as found: a path in the target's mount namespace
	// (a deleted jitdump is read through /proc/<pid>/map_files).
	Path string
	Kind SourceKind
	// How says where discovery found it: "maps", "maps (deleted)",
	// "cwd", "/tmp", "$JITDUMPDIR", "$HOME/.debug/jit", "option", or
	// "perf map"; "file" for ReadFile.
	How     string
	Runtime Runtime

	Records int   // jitdump records or perf map lines read
	Symbols int   // code ranges indexed
	Bad     int   // malformed records or lines, skipped
	Unknown int   // jitdump records with ids this reader does not know, skipped
	Bytes   int64 // bytes read so far

	ArchTimestamp bool // record times are TSC ticks (see Options.ConvertTSC)
	// Truncated describes an incomplete last record or line: the writer
	// is still writing it, or died in the middle. It is read once
	// complete.
	Truncated *FormatError
	// Broken is set when a record's size cannot be right: nothing after
	// it can be found, so reading stopped there.
	Broken *FormatError
	// Problems are the first defects found, with their offsets.
	Problems []*FormatError

	// Forgotten and Dropped are what the index's memory bound cost this
	// file (the package doc, "Memory"): code that later code had
	// replaced, forgotten when the index was compacted, and live code
	// dropped, oldest first, when even the live code passed the bound.
	Forgotten, Dropped int
	// Retired is code that later code replaced before the horizon
	// Process.Forget was told: no lookup needed it any more, so it is
	// not a loss.
	Retired int

	// ReadError is the last error reading the file (I/O, not format).
	ReadError string

	// Refused is set when the file was found but not trusted; Reason
	// says why (not a regular file, owner, a symbolic link, unreadable).
	Refused bool
	Reason  string
}

// source follows one symbol file into a builder.
type source struct {
	info SourceInfo
	f    *os.File
	// reopen opens the file's path again to notice a replaced file; nil
	// when the path cannot change (a deleted file kept open).
	reopen   func() (*os.File, error)
	trust    func(*os.File) string
	dev, ino uint64

	dump    *dumpReader
	pmap    *mapReader
	convert func(uint64) uint64

	rt    Runtime           // the runtime this file's names have shown so far
	dbg   pendingDebug      // the CODE_DEBUG_INFO for the next CODE_LOAD
	unw   pendingUnwind     // the CODE_UNWINDING_INFO for the next CODE_LOAD
	files map[string]string // interned source file names
	// unwindFull: the bound on unwinding infos was reached (said once).
	unwindFull bool
}

// pendingUnwind is a CODE_UNWINDING_INFO's .eh_frame and .eh_frame_hdr
// (a copy: the record's bytes are the reader's buffer).
type pendingUnwind struct {
	data    []byte
	hdrSize uint64
}

type pendingDebug struct {
	set     bool
	addr    uint64
	file    string
	line    int
	entries []lineEntry // with line tables: offsets still absolute
	lowest  uint64      // the lowest entry's address
}

func newSource(f *os.File, kind SourceKind, path, how string) (*source, error) {
	s := &source{f: f, info: SourceInfo{Path: path, Kind: kind, How: how}}
	if err := s.stat(); err != nil {
		return nil, err
	}
	s.rt = runtimeFromPath(path)
	s.info.Runtime = s.rt
	switch kind {
	case KindJitdump:
		s.dump = newDumpReader(path)
	case KindPerfMap:
		s.pmap = newMapReader(path)
	}
	return s, nil
}

// configure applies the options that change how records are read.
func (s *source) configure(opts Options) {
	s.convert = opts.ConvertTSC
	if opts.LineTables && s.dump != nil {
		s.dump.entries = make([]debugEntry, 0, 16)
	}
}

func (s *source) stat() error {
	var st unix.Stat_t
	if err := unix.Fstat(int(s.f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", s.info.Path, err)
	}
	s.dev, s.ino = st.Dev, st.Ino
	return nil
}

// sniffKind tells a jitdump from a perf map by the magic.
func sniffKind(r io.ReaderAt) SourceKind {
	var b [4]byte
	if n, _ := r.ReadAt(b[:], 0); n == 4 {
		if binary.LittleEndian.Uint32(b[:]) == Magic || binary.BigEndian.Uint32(b[:]) == Magic {
			return KindJitdump
		}
	}
	return KindPerfMap
}

// replaced reports whether the file's path now names another file (or
// the file shrank), switching to the new file if it is trusted.
func (s *source) replaced() (bool, error) {
	if s.reopen != nil {
		if nf, err := s.reopen(); err == nil {
			var st unix.Stat_t
			switch {
			case unix.Fstat(int(nf.Fd()), &st) != nil, st.Dev == s.dev && st.Ino == s.ino:
				nf.Close()
			case s.trust != nil && s.trust(nf) != "":
				nf.Close() // a new file we may not read: keep the old one
			default:
				s.f.Close()
				s.f, s.dev, s.ino = nf, st.Dev, st.Ino
				return true, nil
			}
		}
	}
	size, err := s.size()
	if err != nil {
		return false, err
	}
	return size < s.consumed(), nil
}

func (s *source) size() (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(s.f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", s.info.Path, err)
	}
	return st.Size, nil
}

func (s *source) consumed() int64 {
	if s.dump != nil {
		return s.dump.off
	}
	return s.pmap.off
}

// reset forgets what was read, to read the file again from the start.
func (s *source) reset() {
	if s.dump != nil {
		s.dump.reset()
	} else {
		s.pmap.reset()
	}
	s.dbg = pendingDebug{}
	s.unw, s.unwindFull = pendingUnwind{}, false
	s.rt = runtimeFromPath(s.info.Path)
	s.info.Symbols, s.info.Forgotten, s.info.Dropped, s.info.Retired = 0, 0, 0, 0
}

// ingest reads what was appended since the last call into b. final takes
// a perf map's last line even without its newline (the file is complete).
func (s *source) ingest(b *builder, final bool) error {
	size, err := s.size()
	if err != nil {
		return err
	}
	if s.dump != nil {
		err = s.dump.read(s.f, size, func(r *record) {
			s.record(b, r)
			b.bound()
		})
	} else {
		err = s.pmap.read(s.f, size, final, func(start, size uint64, name []byte) {
			s.mapLine(b, start, size, name)
			b.bound()
		})
	}
	s.sync()
	s.syncLosses(b)
	return err
}

// syncLosses copies what the index's memory bound cost this file.
func (s *source) syncLosses(b *builder) {
	if l := b.lost[s.info.Path]; l != nil {
		s.info.Forgotten, s.info.Dropped, s.info.Retired = l.forgotten, l.dropped, l.retired
	}
}

// sync copies the readers' counts into info.
func (s *source) sync() {
	in := &s.info
	in.Runtime = s.rt
	if d := s.dump; d != nil {
		in.Records, in.Bad, in.Unknown, in.Bytes = d.records(), d.bad, d.unknown, d.off
		in.ArchTimestamp = d.hdr.ArchTimestamp()
		in.Truncated, in.Broken, in.Problems = d.partial, d.broken, d.problems
		return
	}
	m := s.pmap
	in.Records, in.Bad, in.Bytes = m.line, m.bad, m.off
	in.Truncated, in.Problems = m.partial, m.problems
}

func (s *source) runtimeOf(name string) Runtime {
	rt := detectRuntime(name)
	if rt == RuntimeUnknown {
		return s.rt
	}
	if s.rt == RuntimeUnknown {
		s.rt = rt
	}
	return rt
}

func (s *source) time(t uint64) uint64 {
	if s.dump.hdr.ArchTimestamp() {
		if s.convert == nil {
			return 0 // unknown clock: order alone decides
		}
		return s.convert(t)
	}
	return t
}

func (s *source) intern(b []byte) string {
	if f, ok := s.files[string(b)]; ok {
		return f
	}
	if s.files == nil {
		s.files = make(map[string]string)
	}
	f := string(b)
	s.files[f] = f
	return f
}

func (s *source) record(b *builder, r *record) {
	switch r.typ {
	case CodeUnwindingInfo:
		s.unw = pendingUnwind{data: append(s.unw.data[:0], r.unwindData...), hdrSize: r.ehFrameHdrSize}
	case CodeDebugInfo:
		entries := s.dbg.entries[:0]
		lowest := ^uint64(0)
		for _, e := range r.dbgEntries {
			entries = append(entries, lineEntry{off: e.addr, line: int32(e.line), file: b.fileIndex(s.intern(e.file))})
			lowest = min(lowest, e.addr)
		}
		s.dbg = pendingDebug{set: true, addr: r.addr, file: s.intern(r.dbgFile), line: int(r.dbgLine), entries: entries, lowest: lowest}
	case CodeLoad:
		dbg := s.dbg
		s.dbg = pendingDebug{entries: dbg.entries[:0]}
		if r.codeSize == 0 {
			return
		}
		sym := s.symbol(r.addr, r.codeSize, string(cutName(r.name)), s.time(r.time))
		sym.CodeIndex = r.codeIndex
		matched := dbg.set && dbg.addr == r.addr
		// The name's own file wins over a debug entry that disagrees,
		// and the entry's line table goes with it: Node.js 20 writes
		// garbage file names for user scripts into CODE_DEBUG_INFO,
		// some of which happen to be text.
		if matched && dbg.file != "" && sym.File != "" && sym.File != dbg.file {
			matched = false
		}
		if matched && dbg.file != "" {
			sym.File, sym.Line = dbg.file, dbg.line
		}
		id := b.add(layerJitdump, sym, false)
		if matched && len(dbg.entries) > 0 {
			b.addLines(id, lineTable(dbg.entries, dbg.lowest, r.addr, r.codeSize))
		}
		unw := s.unw
		s.unw = pendingUnwind{data: unw.data[:0]}
		if !b.addUnwinding(id, unw.data, unw.hdrSize) && !s.unwindFull {
			s.unwindFull = true
			s.dump.problem(r.off, "unwinding infos pass %d MiB: the rest are not kept (JIT code without frame pointers unwinds partially)", maxUnwindBytes>>20)
		}
		s.info.Symbols++
	case CodeMove:
		s.move(b, r)
	}
}

// lineTable turns debug entries into offsets in the code. LLVM and V8
// add 0x40 to every address (perf puts the code after an ELF header);
// entries that start at code_addr+0x40 or later are taken to have it.
// Entries outside the code are dropped; the rest are sorted by offset.
func lineTable(entries []lineEntry, lowest, codeAddr, codeSize uint64) []lineEntry {
	bias := uint64(0)
	if lowest >= codeAddr+debugAddrBias {
		bias = debugAddrBias
	}
	out := entries[:0]
	for _, e := range entries {
		if e.off < codeAddr+bias || e.off-codeAddr-bias >= codeSize {
			continue
		}
		e.off -= codeAddr + bias
		out = append(out, e)
	}
	slices.SortStableFunc(out, func(a, b lineEntry) int { return cmp.Compare(a.off, b.off) })
	return out
}

func (s *source) symbol(start, size uint64, name string, loaded uint64) Symbol {
	rt := s.runtimeOf(name)
	dn := DisplayName(rt, name)
	return Symbol{Start: start, Size: size, Name: name, Display: dn.Name, File: dn.File, Line: dn.Line,
		Runtime: rt, Source: s.info.Path, Loaded: loaded}
}

// move vacates the old range and loads the same code at the new one.
func (s *source) move(b *builder, r *record) {
	old, ok := b.latest(layerJitdump, r.addr)
	if !ok || old.tomb {
		s.dump.problem(r.off, "CODE_MOVE of code_index %d from %#x: no code known there", r.codeIndex, r.addr)
		return
	}
	size := r.codeSize
	if size == 0 {
		size = old.sym.Size
	}
	t := s.time(r.time)
	b.add(layerJitdump, Symbol{Start: r.addr, Size: size, Source: s.info.Path, Loaded: t}, true)
	sym := old.sym
	sym.Start, sym.Size, sym.Loaded = r.newAddr, size, t
	id := b.add(layerJitdump, sym, false)
	// The line table holds offsets in the code, the unwinding info
	// addresses relative to it: they move with it.
	moved := b.store.slot(id)
	moved.linesOff, moved.linesLen = old.linesOff, old.linesLen
	moved.unwind = old.unwind
	s.info.Symbols++
}

func (s *source) mapLine(b *builder, start, size uint64, name []byte) {
	if size == 0 {
		return
	}
	b.add(layerPerfMap, s.symbol(start, size, string(cutName(name)), 0), false)
	s.info.Symbols++
}

func (s *source) close() error {
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}

// UnmarshalText reads what MarshalText wrote.
func (k *SourceKind) UnmarshalText(b []byte) error {
	for _, c := range []SourceKind{KindJitdump, KindPerfMap} {
		if c.String() == string(b) {
			*k = c
			return nil
		}
	}
	return fmt.Errorf("unknown source kind %q", b)
}
