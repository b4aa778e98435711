package hotspot

import (
	"errors"
	"fmt"
)

// Frame is one Java frame, as jstack prints it: "at Ledger.settleChecking(Stall.java:35)".
type Frame struct {
	Method *Method
	BCI    int // the bytecode index; -1 when unknown
	Line   int // the source line; 0 when unknown
	Kind   FrameKind
	// Locks are the frame's lines about locks, as jstack prints them
	// under it: what it waits for (the top frame) and the monitors it
	// holds ("- locked"), most recent first. From memory, only
	// interpreted frames' held monitors are read (compiled frames keep
	// theirs in debug information not read here).
	Locks []FrameLock
	// Module is the class's module and version as jstack prints it
	// ("java.base@17.0.15"); from Thread.print only.
	Module string
}

// FrameLock is one "- locked <0x…> (a java.lang.Object)" line.
type FrameLock struct {
	Kind   FrameLockKind
	Object Object
}

// FrameLockKind is what a frame does with a lock.
type FrameLockKind int

const (
	Locked          FrameLockKind = iota // "- locked"
	WaitingToLock                        // "- waiting to lock": blocked entering synchronized
	WaitingOn                            // "- waiting on": in Object.wait
	ParkingFor                           // "- parking to wait for": LockSupport.park(blocker)
	WaitingToRelock                      // "- waiting to re-lock in wait()"
	Eliminated                           // "- eliminated": a lock C2 removed (escape analysis)
)

var frameLockText = [...]string{
	Locked:          "locked",
	WaitingToLock:   "waiting to lock",
	WaitingOn:       "waiting on",
	ParkingFor:      "parking to wait for",
	WaitingToRelock: "waiting to re-lock in wait()",
	Eliminated:      "eliminated",
}

func (k FrameLockKind) String() string {
	if int(k) < len(frameLockText) {
		return frameLockText[k]
	}
	return "lock"
}

// FrameKind says how a frame runs.
type FrameKind int

const (
	Interpreted FrameKind = iota
	Compiled              // in an nmethod
	Inlined               // a method C1 or C2 compiled into its caller's nmethod
	Native                // a native method (its wrapper or the interpreter's native entry)
)

func (k FrameKind) String() string {
	switch k {
	case Interpreted:
		return "interpreted"
	case Compiled:
		return "compiled"
	case Inlined:
		return "inlined"
	case Native:
		return "native"
	}
	return "unknown"
}

// Registers are where a thread's Java stack starts when it runs Java
// code (no frame anchor): its pc, stack pointer and frame pointer, read
// under a stop. Only PC may be known (then only the top frame is named).
type Registers struct {
	PC, SP, FP uint64
}

// Stack is a thread's Java frames, innermost first, and why the walk
// ended where it did.
type Stack struct {
	Frames []Frame
	// Segments are where each run of Java frames begins in Frames: a
	// Java stack is cut in runs by native code that calls Java again
	// (JNI, reflection, the VM's own calls), each run below an entry
	// frame. Segments[0] is 0 when there are frames.
	Segments []int
	// Cut says why the walk stopped before the thread's first Java
	// frame; nil when it reached it.
	Cut error
}

// The x86-64 interpreter frame, in words from its frame pointer
// (frame_x86.hpp: interpreter_frame_*_offset; VMStructs publishes only
// the first two).
const (
	ifSenderSP  = 1 // fp - 1 word
	ifMethod    = 3 // fp - 3 words
	ifBCP       = 8 // fp - 8 words
	ifInitialSP = 9 // fp - 9 words: the monitor block's bottom; it holds the block's top
)

// maxFrameMonitors bounds the monitors one interpreted frame holds.
const maxFrameMonitors = 256

// maxFrames bounds one thread's Java stack (HotSpot's default 1 MiB
// stack holds some ten thousand small frames; jstack prints them all,
// this reader the first 1,024).
const maxFrames = 1024

// ErrTruncated is the Cut of a stack deeper than maxFrames.
var ErrTruncated = errors.New("deeper than the reader's bound")

// frameOffsets are the VMStructs entries the frame walker needs beyond
// the code cache's.
type frameOffsets struct {
	callStubReturn                       uint64
	nmScopesPcs, nmDeps, nmMetadata      uint64
	cmScopesData                         uint64
	pcOffset, pcScope, pcDescSize        uint64
	cmCodeSize, cmFlags, constMethodSize uint64
	hasLineTable                         int64
	lockObj, lockSize                    uint64
	entryWrapper                         int64 // words from an entry frame's fp to its JavaCallWrapper*
	wrapperAnchor                        uint64
	anchorSP, anchorFP, anchorPC         uint64 // in a JavaFrameAnchor
}

func (vm *VM) frameOffsets() (*frameOffsets, error) {
	n := &need{l: vm.l}
	f := &frameOffsets{}
	f.callStubReturn = n.static("StubRoutines", "_call_stub_return_address")
	f.nmScopesPcs = n.offset("nmethod", "_scopes_pcs_offset")
	f.nmDeps = n.offset("nmethod", "_dependencies_offset")
	f.nmMetadata = n.offset("nmethod", "_metadata_offset")
	f.cmScopesData = n.offset("CompiledMethod", "_scopes_data_begin")
	f.pcOffset = n.offset("PcDesc", "_pc_offset")
	f.pcScope = n.offset("PcDesc", "_scope_decode_offset")
	f.pcDescSize = n.size("PcDesc")
	f.cmCodeSize = n.offset("ConstMethod", "_code_size")
	f.cmFlags = n.offset("ConstMethod", "_flags")
	f.constMethodSize = n.size("ConstMethod")
	f.hasLineTable = n.int("ConstMethod::_has_linenumber_table")
	f.lockObj = n.offset("BasicObjectLock", "_obj")
	f.entryWrapper = n.int("frame::entry_frame_call_wrapper_offset")
	f.wrapperAnchor = n.offset("JavaCallWrapper", "_anchor")
	f.anchorSP = n.offset("JavaFrameAnchor", "_last_Java_sp")
	f.anchorFP = n.offset("JavaFrameAnchor", "_last_Java_fp")
	f.anchorPC = n.offset("JavaFrameAnchor", "_last_Java_pc")
	f.lockSize = n.size("BasicObjectLock")
	return f, n.err("HotSpot's Java frames")
}

// Code finds the code at a pc: a CodeCache read whole, or the VM's own
// lookups through the code heaps' segment maps (what ReadJava uses).
type Code interface {
	Lookup(pc uint64) (*Blob, bool)
	InInterpreter(pc uint64) bool
}

// walker walks one thread's Java frames.
type walker struct {
	vm *VM
	cc Code
	c  *codeOffsets
	f  *frameOffsets
	t  *Thread

	callStubReturn uint64
	out            []Frame
	segments       []int
}

// JavaStack reads the Java frames of t, from its frame anchor (set while
// the thread is out of Java code: blocked, in native code, in the VM) or
// from regs when it runs Java code. cc is the code cache read in the same
// reading (or nil: the VM's segment maps are read as needed).
func (vm *VM) JavaStack(t *Thread, cc Code, regs *Registers) (Stack, error) {
	c, err := vm.codeOffsets()
	if err != nil {
		return Stack{}, err
	}
	f, err := vm.frameOffsets()
	if err != nil {
		return Stack{}, err
	}
	if cc == nil {
		ix, err := vm.codeIndex()
		if err != nil {
			return Stack{}, err
		}
		cc = ix
	}
	w := &walker{vm: vm, cc: cc, c: c, f: f, t: t}
	if w.callStubReturn, err = vm.r.U64(f.callStubReturn, "StubRoutines::_call_stub_return_address"); err != nil {
		return Stack{}, err
	}
	sp, fp, pc, err := w.start(regs)
	if err != nil {
		return Stack{}, err
	}
	if sp == 0 && pc == 0 {
		return Stack{}, nil // no Java frames (a thread in the VM only, or not started)
	}
	w.segments = []int{0}
	cut := w.walk(sp, fp, pc, regs != nil && regs.SP == 0)
	w.markTop()
	if len(w.out) == 0 {
		w.segments = nil
	}
	return Stack{Frames: w.out, Segments: w.segments, Cut: cut}, nil
}

// start finds the topmost Java frame: the anchor's, else the registers'.
func (w *walker) start(regs *Registers) (sp, fp, pc uint64, err error) {
	o := &w.vm.o
	r := w.vm.r
	if sp, err = r.U64(w.t.Addr+o.anchorSP, "JavaFrameAnchor::_last_Java_sp"); err != nil {
		return
	}
	if sp != 0 {
		if fp, err = r.U64(w.t.Addr+o.anchorFP, "JavaFrameAnchor::_last_Java_fp"); err != nil {
			return
		}
		if pc, err = r.U64(w.t.Addr+o.anchorPC, "JavaFrameAnchor::_last_Java_pc"); err != nil {
			return
		}
		if pc == 0 {
			pc, err = r.U64(sp-8, "the last Java frame's return address")
		}
		return
	}
	if regs == nil {
		return 0, 0, 0, nil
	}
	return regs.SP, regs.FP, regs.PC, nil
}

// walk follows the frames from (sp, fp, pc); pcOnly: only the top one is
// named (no stack pointer to go on from).
func (w *walker) walk(sp, fp, pc uint64, pcOnly bool) error {
	unextended := sp
	top := true
	for {
		if len(w.out) >= maxFrames {
			return ErrTruncated
		}
		if pc == w.callStubReturn {
			// An entry frame: native code called Java here. The Java
			// frames that called that native code, if any, start at
			// the anchor its JavaCallWrapper saved.
			next, more, err := w.entrySender(fp)
			if err != nil || !more {
				return err
			}
			sp, unextended, fp, pc = next.sp, next.sp, next.fp, next.pc
			w.segments = append(w.segments, len(w.out))
			top = true
			continue
		}
		if w.cc.InInterpreter(pc) {
			if err := w.interpreted(fp); err != nil {
				return err
			}
			if pcOnly {
				return nil
			}
			next, err := w.interpretedSender(fp)
			if err != nil {
				return err
			}
			sp, unextended, fp, pc = next.sp, next.unextended, next.fp, next.pc
			top = false
			continue
		}
		b, ok := w.cc.Lookup(pc)
		if !ok {
			if top {
				return fmt.Errorf("pc %#x is in no code the VM generated", pc)
			}
			return fmt.Errorf("return address %#x is in no code the VM generated", pc)
		}
		if b.Method != nil {
			if err := w.compiled(b, pc, top); err != nil {
				return err
			}
		}
		if pcOnly {
			return errors.New("only the top frame: its stack pointer is not known")
		}
		if b.FrameSize == 0 {
			return fmt.Errorf("%s at %#x keeps no frame size", b.Name, pc)
		}
		senderSP := unextended + b.FrameSize
		var err error
		if pc, err = w.vm.r.U64(senderSP-8, "a compiled frame's return address"); err != nil {
			return err
		}
		if fp, err = w.vm.r.U64(senderSP-16, "a compiled frame's saved frame pointer"); err != nil {
			return err
		}
		if senderSP <= sp || !w.onStack(senderSP) {
			return fmt.Errorf("frame at sp %#x: its caller's sp %#x is off the thread's stack", sp, senderSP)
		}
		sp, unextended, top = senderSP, senderSP, false
	}
}

// markTop puts what the thread waits for on its top frame, as jstack
// does, and takes the monitor it waits to enter out of the frame's held
// ones: the interpreter records the object in the frame's monitor block
// before it blocks in monitorenter.
func (w *walker) markTop() {
	if len(w.out) == 0 {
		return
	}
	top := &w.out[0]
	var wait []FrameLock
	switch t := w.t; {
	case t.Pending != nil:
		wait = []FrameLock{{Kind: WaitingToLock, Object: t.Pending.Object}}
		kept := top.Locks[:0]
		for _, l := range top.Locks {
			if l.Object.Addr != t.Pending.Object.Addr {
				kept = append(kept, l)
			}
		}
		top.Locks = kept
	case t.Waiting != nil:
		wait = []FrameLock{{Kind: WaitingOn, Object: t.Waiting.Object}}
	case t.Blocker != nil && (t.Status == StatusParked || t.Status == StatusTimedParked):
		wait = []FrameLock{{Kind: ParkingFor, Object: *t.Blocker}}
	}
	top.Locks = append(wait, top.Locks...)
}

type frameAt struct{ sp, unextended, fp, pc uint64 }

// maxSegments bounds the runs of Java frames followed through entry
// frames (each a native call into Java).
const maxSegments = 64

// entrySender reads the JavaCallWrapper of the entry frame at fp and the
// anchor it saved: the last Java frame before native code called into
// Java again; more is false when there was none.
func (w *walker) entrySender(fp uint64) (frameAt, bool, error) {
	var n frameAt
	if len(w.segments) >= maxSegments {
		return n, false, fmt.Errorf("more than %d runs of Java frames", maxSegments)
	}
	if !w.onStack(fp) {
		return n, false, fmt.Errorf("entry frame's fp %#x is off the thread's stack", fp)
	}
	r := w.vm.r
	jcw, err := r.U64(uint64(int64(fp)+w.f.entryWrapper*8), "an entry frame's JavaCallWrapper")
	if err != nil {
		return n, false, err
	}
	a := jcw + w.f.wrapperAnchor
	if n.sp, err = r.U64(a+w.f.anchorSP, "JavaCallWrapper anchor's last_Java_sp"); err != nil || n.sp == 0 {
		return n, false, err
	}
	if n.fp, err = r.U64(a+w.f.anchorFP, "JavaCallWrapper anchor's last_Java_fp"); err != nil {
		return n, false, err
	}
	if n.pc, err = r.U64(a+w.f.anchorPC, "JavaCallWrapper anchor's last_Java_pc"); err != nil {
		return n, false, err
	}
	if n.pc == 0 {
		if n.pc, err = r.U64(n.sp-8, "the last Java frame's return address"); err != nil {
			return n, false, err
		}
	}
	if n.sp <= fp || !w.onStack(n.sp) {
		return n, false, fmt.Errorf("entry frame at fp %#x: its caller's Java sp %#x is not above it", fp, n.sp)
	}
	return n, true, nil
}

// interpretedSender is the caller of the interpreted frame at fp.
func (w *walker) interpretedSender(fp uint64) (frameAt, error) {
	r := w.vm.r
	if !w.onStack(fp) {
		return frameAt{}, fmt.Errorf("interpreted frame's fp %#x is off the thread's stack", fp)
	}
	var n frameAt
	var err error
	n.sp = fp + 16
	if n.unextended, err = r.U64(fp-ifSenderSP*8, "an interpreted frame's sender sp"); err != nil {
		return n, err
	}
	if n.pc, err = r.U64(fp+8, "an interpreted frame's return address"); err != nil {
		return n, err
	}
	if n.fp, err = r.U64(fp, "an interpreted frame's saved frame pointer"); err != nil {
		return n, err
	}
	if n.fp <= fp || !w.onStack(n.unextended) {
		return n, fmt.Errorf("interpreted frame at fp %#x: its caller's frame (fp %#x, sp %#x) is not above it", fp, n.fp, n.unextended)
	}
	return n, nil
}

// onStack says whether a is on the thread's stack (always, when the
// stack's bounds are unknown).
func (w *walker) onStack(a uint64) bool {
	return w.t.stackHi == 0 || (a >= w.t.stackLo && a < w.t.stackHi)
}

// interpreted reads the interpreted frame at fp: its Method and bytecode
// pointer.
func (w *walker) interpreted(fp uint64) error {
	r := w.vm.r
	mp, err := r.U64(fp-ifMethod*8, "an interpreted frame's Method*")
	if err != nil {
		return err
	}
	m, err := w.vm.method(w.c, mp)
	if err != nil {
		return err
	}
	bcp, err := r.U64(fp-ifBCP*8, "an interpreted frame's bytecode pointer")
	if err != nil {
		return err
	}
	fr := Frame{Method: m, BCI: -1, Kind: Interpreted}
	cm, err := r.U64(mp+w.c.mConst, "Method::_constMethod")
	if err != nil {
		return err
	}
	codeBase := cm + w.f.constMethodSize
	size, err := r.U16(cm+w.f.cmCodeSize, "ConstMethod::_code_size")
	if err != nil {
		return err
	}
	switch {
	case m.IsNative:
		fr.Kind = Native
	case bcp >= codeBase && bcp < codeBase+uint64(size):
		fr.BCI = int(bcp - codeBase)
		fr.Line = w.line(cm, fr.BCI)
	}
	held, err := w.frameMonitors(fp)
	for _, o := range held {
		fr.Locks = append(fr.Locks, FrameLock{Kind: Locked, Object: o})
	}
	w.out = append(w.out, fr)
	return err
}

// frameMonitors reads the objects locked in the interpreted frame at fp:
// its BasicObjectLocks, from the block's top (the most recently locked)
// to its bottom.
func (w *walker) frameMonitors(fp uint64) ([]Object, error) {
	r := w.vm.r
	bottom := fp - ifInitialSP*8
	top, err := r.U64(bottom, "an interpreted frame's monitor block top")
	if err != nil {
		return nil, err
	}
	if top > bottom || w.f.lockSize == 0 || (bottom-top)/w.f.lockSize > maxFrameMonitors {
		return nil, fmt.Errorf("interpreted frame at fp %#x: monitor block [%#x, %#x)", fp, top, bottom)
	}
	var out []Object
	for a := top; a+w.f.lockSize <= bottom; a += w.f.lockSize {
		obj, err := r.U64(a+w.f.lockObj, "BasicObjectLock::_obj")
		if err != nil {
			return out, err
		}
		if obj == 0 {
			continue // a free slot
		}
		ob, err := w.vm.object(obj)
		if err != nil {
			return out, err
		}
		out = append(out, *ob)
	}
	return out, nil
}

// compiled reads the frames of nmethod b at pc: the inlined methods its
// debug information records at pc, innermost first, then b's own.
func (w *walker) compiled(b *Blob, pc uint64, top bool) error {
	if b.Method.IsNative {
		w.out = append(w.out, Frame{Method: b.Method, BCI: -1, Kind: Native})
		return nil
	}
	scopes, err := w.scopes(b, pc, top)
	if err != nil || len(scopes) == 0 {
		// The method is known even where its debug information is
		// not: name it without a line.
		w.out = append(w.out, Frame{Method: b.Method, BCI: -1, Kind: Compiled})
		return nil
	}
	w.out = append(w.out, scopes...)
	return nil
}

// maxScopes bounds an inlining chain (C2's MaxInlineLevel is 15).
const maxScopes = 64

// scopes decodes the ScopeDescs at pc in nmethod b: its PcDesc (exact for
// a return address, the next one for a top frame stopped between two),
// then each scope's method and bci, following the sender chain.
func (w *walker) scopes(b *Blob, pc uint64, top bool) ([]Frame, error) {
	r := w.vm.r
	f := w.f
	hdr := b.addr
	pcsOff, err := r.U32(hdr+f.nmScopesPcs, "nmethod::_scopes_pcs_offset")
	if err != nil {
		return nil, err
	}
	depsOff, err := r.U32(hdr+f.nmDeps, "nmethod::_dependencies_offset")
	if err != nil {
		return nil, err
	}
	mdOff, err := r.U32(hdr+f.nmMetadata, "nmethod::_metadata_offset")
	if err != nil {
		return nil, err
	}
	data, err := r.U64(hdr+f.cmScopesData, "CompiledMethod::_scopes_data_begin")
	if err != nil {
		return nil, err
	}
	if depsOff < pcsOff || depsOff-pcsOff > 1<<24 || f.pcDescSize == 0 {
		return nil, fmt.Errorf("nmethod %#x: PcDescs [%d, %d)", hdr, pcsOff, depsOff)
	}
	rel := int64(pc - b.Start)
	decode := -1
	best := int64(-1)
	for a := hdr + uint64(pcsOff); a+f.pcDescSize <= hdr+uint64(depsOff); a += f.pcDescSize {
		off, err := r.U32(a+f.pcOffset, "PcDesc::_pc_offset")
		if err != nil {
			return nil, err
		}
		d, err := r.U32(a+f.pcScope, "PcDesc::_scope_decode_offset")
		if err != nil {
			return nil, err
		}
		po := int64(int32(off))
		if po == rel {
			decode = int(int32(d))
			break
		}
		if top && po > rel && (best < 0 || po < best) {
			best, decode = po, int(int32(d))
		}
	}
	if decode <= 0 { // 0 is DebugInformationRecorder::serialized_null
		return nil, nil
	}
	metadataEnd := data
	metadata := hdr + uint64(mdOff)
	var out []Frame
	for range maxScopes {
		if decode <= 0 {
			if len(out) > 0 {
				out[len(out)-1].Kind = Compiled // the nmethod's own method
			}
			return out, nil
		}
		s := &stream{r: r, at: data + uint64(decode)}
		sender := s.int()
		mi := s.int()
		bci := s.int() - 1 // read_bci: InvocationEntryBci is -1
		if s.err != nil {
			return out, s.err
		}
		if mi <= 0 || metadata+uint64(mi)*8 > metadataEnd {
			return out, fmt.Errorf("nmethod %#x: scope's method index %d outside its metadata", hdr, mi)
		}
		mp, err := r.U64(metadata+uint64(mi-1)*8, "nmethod metadata")
		if err != nil {
			return out, err
		}
		m, err := w.vm.method(w.c, mp)
		if err != nil {
			return out, err
		}
		fr := Frame{Method: m, BCI: int(bci), Kind: Inlined}
		if cm, err := r.U64(mp+w.c.mConst, "Method::_constMethod"); err == nil {
			fr.Line = w.line(cm, fr.BCI)
		}
		out = append(out, fr)
		if int(sender) == decode {
			return out, fmt.Errorf("nmethod %#x: scope at %d is its own sender", hdr, decode)
		}
		decode = int(sender)
	}
	return out, fmt.Errorf("nmethod %#x: more than %d inlined scopes", hdr, maxScopes)
}

// maxLineEntries bounds a method's line number table (a method's code is
// at most 65,535 bytes).
const maxLineEntries = 1 << 16

// line is the source line of bci in the ConstMethod at cm (as
// Method::line_number_from_bci: the entry at bci, else the closest
// before it); 0 when unknown.
func (w *walker) line(cm uint64, bci int) int {
	r := w.vm.r
	flags, err := r.U16(cm+w.f.cmFlags, "ConstMethod::_flags")
	if err != nil || int64(flags)&w.f.hasLineTable == 0 {
		return 0
	}
	size, err := r.U16(cm+w.f.cmCodeSize, "ConstMethod::_code_size")
	if err != nil {
		return 0
	}
	if bci < 0 {
		bci = 0
	}
	s := &stream{r: r, at: cm + w.f.constMethodSize + uint64(size)}
	curBCI, curLine := 0, 0
	bestBCI, bestLine := 0, 0
	for range maxLineEntries {
		b := s.byte()
		if s.err != nil || b == 0 {
			break
		}
		if b == 0xff {
			curBCI += int(s.signed())
			curLine += int(s.signed())
		} else {
			curBCI += int(b >> 3)
			curLine += int(b & 7)
		}
		if s.err != nil {
			break
		}
		if curBCI == bci {
			return curLine
		}
		if curBCI < bci && curBCI >= bestBCI {
			bestBCI, bestLine = curBCI, curLine
		}
	}
	return bestLine
}

// stream reads HotSpot's compressed streams (CompressedReadStream):
// integers in UNSIGNED5, Pack200's coding, one to five bytes.
type stream struct {
	r   *Reader
	at  uint64
	err error
}

func (s *stream) byte() uint8 {
	if s.err != nil {
		return 0
	}
	b, err := s.r.U8(s.at, "compressed stream")
	s.at++
	s.err = err
	return b
}

// int reads an UNSIGNED5 integer: bytes below 192 end it, each byte adds
// its value times 64^i.
func (s *stream) int() uint32 {
	const low, lgH = 192, 6
	sum := uint32(s.byte())
	if sum < low {
		return sum
	}
	shift := uint(lgH)
	for i := 1; i <= 4; i++ {
		b := uint32(s.byte())
		sum += b << shift
		if b < low {
			break
		}
		shift += lgH
	}
	return sum
}

// signed reads a SIGNED5 integer: UNSIGNED5 with the sign in bit 0.
func (s *stream) signed() int32 {
	v := s.int()
	return int32(v>>1) ^ -int32(v&1)
}
