package hotspot

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Blob is one piece of code in the VM's code cache: a compiled Java
// method (an nmethod), a native method's wrapper, or a stub the VM
// generated (the interpreter, adapters, runtime stubs).
type Blob struct {
	Start, End uint64 // the code: [Start, End)
	// Name is what HotSpot's own perf map calls it (jcmd
	// Compiler.perfmap): "long Hot.fibonacci(long)" for a method,
	// "Interpreter", "I2C/C2I adapters" for stubs.
	Name string
	// Method is the Java method of an nmethod; nil for stubs.
	Method *Method
	// Level is an nmethod's tier: 1 to 3 C1, 4 C2 (CompLevel).
	Level int
	// FrameSize is the size of the blob's frames in bytes (0 for the
	// interpreter, whose frames vary).
	FrameSize uint64

	addr uint64 // the CodeBlob
}

// Method is a Java method as the VM holds it (Method, ConstMethod and its
// ConstantPool).
type Method struct {
	Class     string // "java.util.HashMap", "Stall$Body"
	Name      string // "putVal"
	Signature string // the descriptor: "(ILjava/lang/Object;)V"
	Addr      uint64 // the Method*
	// File is the source file the class names (SourceFile attribute),
	// "" when it has none.
	File string
	// IsNative marks a native method (ACC_NATIVE).
	IsNative bool
}

// String is how jstack names a frame's method: "Ledger.settleChecking".
func (m *Method) String() string { return m.Class + "." + m.Name }

// CodeCache is the VM's compiled code, sorted by address.
type CodeCache struct {
	Blobs []Blob
	// Interpreter is the range of the template interpreter's code:
	// a pc there is an interpreted frame.
	Interpreter [2]uint64
	// Skipped counts blocks whose blob could not be read (freed while
	// read, garbage).
	Skipped int
	Err     error // what stopped a walk early
}

// Lookup returns the blob holding pc.
func (c *CodeCache) Lookup(pc uint64) (*Blob, bool) {
	i, found := slices.BinarySearchFunc(c.Blobs, pc, func(b Blob, pc uint64) int {
		if pc < b.Start {
			return 1
		}
		if pc >= b.End {
			return -1
		}
		return 0
	})
	if !found {
		return nil, false
	}
	return &c.Blobs[i], true
}

// InInterpreter says whether pc is in the interpreter's code.
func (c *CodeCache) InInterpreter(pc uint64) bool {
	return pc >= c.Interpreter[0] && pc < c.Interpreter[1]
}

// codeIndex finds the blob holding a pc without reading the whole code
// cache: each CodeHeap's segment map says, for every segment, how many
// segments back its block starts (HotSpot's CodeHeap::find_block_for),
// so a lookup reads a few bytes of the map, then the blob. Blobs found
// are kept for the VM's reading.
type codeIndex struct {
	vm          *VM
	c           *codeOffsets
	heaps       []heapRange
	interpreter [2]uint64
	blobs       map[uint64]*Blob // by block
	names       map[uint64]string
}

type heapRange struct {
	low, high, segmap uint64
	log2              uint
}

// maxSegmapHops bounds a walk back through a segment map: a block of n
// segments takes at most n/254 hops, and blocks are at most a few MiB.
const maxSegmapHops = 1 << 16

// freeSegment marks a segment of a free block in a segment map.
const freeSegment = 0xff

func (vm *VM) codeIndex() (*codeIndex, error) {
	if vm.code != nil {
		return vm.code, nil
	}
	c, err := vm.codeOffsets()
	if err != nil {
		return nil, err
	}
	cc := &CodeCache{}
	if err := vm.readInterpreter(c, cc); err != nil {
		return nil, err
	}
	ix := &codeIndex{vm: vm, c: c, interpreter: cc.Interpreter, blobs: map[uint64]*Blob{}, names: map[uint64]string{}}
	heaps, err := vm.heaps(c)
	if err != nil {
		return nil, err
	}
	for _, h := range heaps {
		hr, err := vm.heapRange(c, h)
		if err != nil {
			return nil, err
		}
		ix.heaps = append(ix.heaps, hr)
	}
	vm.code = ix
	return ix, nil
}

func (vm *VM) heapRange(c *codeOffsets, heap uint64) (heapRange, error) {
	var h heapRange
	var err error
	if h.low, err = vm.r.U64(heap+c.heapMemory+c.vsLow, "CodeHeap::_memory._low"); err != nil {
		return h, err
	}
	if h.high, err = vm.r.U64(heap+c.heapMemory+c.vsHigh, "CodeHeap::_memory._high"); err != nil {
		return h, err
	}
	if h.segmap, err = vm.r.U64(heap+c.heapSegmap+c.vsLow, "CodeHeap::_segmap._low"); err != nil {
		return h, err
	}
	log2, err := vm.r.U32(heap+c.heapLog2, "CodeHeap::_log2_segment_size")
	if err != nil {
		return h, err
	}
	if log2 < 4 || log2 > 16 || h.high < h.low || h.high-h.low > 1<<34 {
		return h, fmt.Errorf("code heap %#x: segments of 2^%d bytes over [%#x, %#x): not a code heap", heap, log2, h.low, h.high)
	}
	h.log2 = uint(log2)
	return h, nil
}

// InInterpreter says whether pc is in the interpreter's code.
func (ix *codeIndex) InInterpreter(pc uint64) bool {
	return pc >= ix.interpreter[0] && pc < ix.interpreter[1]
}

// Lookup finds the blob holding pc.
func (ix *codeIndex) Lookup(pc uint64) (*Blob, bool) {
	for _, h := range ix.heaps {
		if pc < h.low || pc >= h.high {
			continue
		}
		block, ok := ix.blockFor(h, pc)
		if !ok {
			return nil, false
		}
		b, ok := ix.blobs[block]
		if !ok {
			blob, err := ix.vm.blob(ix.c, block+ix.c.heapBlockSize, ix.names)
			if err != nil {
				ix.blobs[block] = nil
				return nil, false
			}
			b = &blob
			ix.blobs[block] = b
		}
		if b == nil || pc < b.Start || pc >= b.End {
			return nil, false
		}
		return b, true
	}
	return nil, false
}

// blockFor walks the segment map back from pc's segment to its block's
// first, and checks that the block is in use.
func (ix *codeIndex) blockFor(h heapRange, pc uint64) (uint64, bool) {
	seg := (pc - h.low) >> h.log2
	r := ix.vm.r
	for range maxSegmapHops {
		v, err := r.U8(h.segmap+seg, "CodeHeap segment map")
		if err != nil || v == freeSegment {
			return 0, false
		}
		if v == 0 {
			block := h.low + seg<<h.log2
			used, err := r.U8(block+ix.c.headerUsed, "HeapBlock used")
			return block, err == nil && used != 0
		}
		if uint64(v) > seg {
			return 0, false
		}
		seg -= uint64(v)
	}
	return 0, false
}

// Bounds on a walk of the code cache: HotSpot's default reserve is 240
// MiB in 128-byte segments; a busy service holds tens of thousands of
// blobs.
const (
	maxHeaps = 16
	maxBlobs = 1 << 20
)

// codeOffsets are the VMStructs entries the code cache readers need.
type codeOffsets struct {
	heaps, arrLen, arrData                          uint64
	heapMemory, heapLog2, heapSegmap, vsLow, vsHigh uint64
	headerLength, headerUsed, heapBlockSize         uint64
	blobName, blobCodeBegin, blobCodeEnd            uint64
	blobFrameSize                                   uint64
	cmMethod, nmLevel                               uint64
	mConst, mAccess                                 uint64
	cmConstants, cmName, cmSignature                uint64
	cpSourceFile                                    uint64
	interpCode, sqBuffer, sqLimit                   uint64
}

func (vm *VM) codeOffsets() (*codeOffsets, error) {
	n := &need{l: vm.l}
	c := &codeOffsets{}
	c.heaps = n.static("CodeCache", "_heaps")
	c.arrLen = n.offset("GrowableArrayBase", "_len")
	c.arrData = n.offset("GrowableArray<int>", "_data")
	c.heapMemory = n.offset("CodeHeap", "_memory")
	c.heapLog2 = n.offset("CodeHeap", "_log2_segment_size")
	c.heapSegmap = n.offset("CodeHeap", "_segmap")
	c.vsLow = n.offset("VirtualSpace", "_low")
	c.vsHigh = n.offset("VirtualSpace", "_high")
	c.headerLength = n.offset("HeapBlock::Header", "_length")
	c.headerUsed = n.offset("HeapBlock::Header", "_used")
	c.heapBlockSize = n.size("HeapBlock")
	c.blobName = n.offset("CodeBlob", "_name")
	c.blobCodeBegin = n.offset("CodeBlob", "_code_begin")
	c.blobCodeEnd = n.offset("CodeBlob", "_code_end")
	c.blobFrameSize = n.offset("CodeBlob", "_frame_size")
	c.cmMethod = n.offset("CompiledMethod", "_method")
	c.nmLevel = n.offset("nmethod", "_comp_level")
	c.mConst = n.offset("Method", "_constMethod")
	c.mAccess = n.offset("Method", "_access_flags")
	c.cmConstants = n.offset("ConstMethod", "_constants")
	c.cmName = n.offset("ConstMethod", "_name_index")
	c.cmSignature = n.offset("ConstMethod", "_signature_index")
	c.cpSourceFile = n.offset("ConstantPool", "_source_file_name_index")
	c.interpCode = n.static("AbstractInterpreter", "_code")
	c.sqBuffer = n.offset("StubQueue", "_stub_buffer")
	c.sqLimit = n.offset("StubQueue", "_buffer_limit")
	return c, n.err("HotSpot's code cache")
}

// CodeCache walks every code heap block by block (each HeapBlock's
// length in segments leads to the next) and reads each blob in use.
// Blobs that cannot be read are counted, not fatal: the cache changes
// while it is read.
func (vm *VM) CodeCache() (*CodeCache, error) {
	c, err := vm.codeOffsets()
	if err != nil {
		return nil, err
	}
	cc := &CodeCache{}
	if err := vm.readInterpreter(c, cc); err != nil {
		return nil, err
	}
	heaps, err := vm.heaps(c)
	if err != nil {
		return nil, err
	}
	names := map[uint64]string{} // CodeBlob::_name pointers are string literals
	for _, heap := range heaps {
		if err := vm.walkHeap(c, heap, cc, names); err != nil {
			cc.Err = err
			break
		}
	}
	slices.SortFunc(cc.Blobs, func(a, b Blob) int { return cmp.Compare(a.Start, b.Start) })
	return cc, nil
}

// codeBounds reads the code cache's range (CodeCache::_low_bound and
// _high_bound).
func (vm *VM) codeBounds() (lo, hi uint64, err error) {
	n := &need{l: vm.l}
	loAt, hiAt := n.static("CodeCache", "_low_bound"), n.static("CodeCache", "_high_bound")
	if err := n.err("HotSpot's code cache"); err != nil {
		return 0, 0, err
	}
	if lo, err = vm.r.U64(loAt, "CodeCache::_low_bound"); err != nil {
		return 0, 0, err
	}
	if hi, err = vm.r.U64(hiAt, "CodeCache::_high_bound"); err != nil {
		return 0, 0, err
	}
	if hi < lo {
		return 0, 0, fmt.Errorf("code cache [%#x, %#x): its end before its start", lo, hi)
	}
	return lo, hi, nil
}

// heaps reads the addresses of the code cache's CodeHeaps.
func (vm *VM) heaps(c *codeOffsets) ([]uint64, error) {
	arr, err := vm.r.U64(c.heaps, "CodeCache::_heaps")
	if err != nil {
		return nil, err
	}
	n, err := vm.r.U32(arr+c.arrLen, "CodeCache::_heaps length")
	if err != nil {
		return nil, err
	}
	if n > maxHeaps {
		return nil, fmt.Errorf("CodeCache::_heaps of %d heaps: %w (%d)", n, ErrTooMany, maxHeaps)
	}
	data, err := vm.r.U64(arr+c.arrData, "CodeCache::_heaps data")
	if err != nil {
		return nil, err
	}
	out := make([]uint64, 0, n)
	for i := range uint64(n) {
		h, err := vm.r.U64(data+i*8, "CodeHeap*")
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

func (vm *VM) readInterpreter(c *codeOffsets, cc *CodeCache) error {
	q, err := vm.r.U64(c.interpCode, "AbstractInterpreter::_code")
	if err != nil || q == 0 {
		return err
	}
	buf, err := vm.r.U64(q+c.sqBuffer, "StubQueue::_stub_buffer")
	if err != nil {
		return err
	}
	limit, err := vm.r.U32(q+c.sqLimit, "StubQueue::_buffer_limit")
	if err != nil {
		return err
	}
	cc.Interpreter = [2]uint64{buf, buf + uint64(limit)}
	return nil
}

// walkHeap reads the blocks of one CodeHeap.
func (vm *VM) walkHeap(c *codeOffsets, heap uint64, cc *CodeCache, names map[uint64]string) error {
	h, err := vm.heapRange(c, heap)
	if err != nil {
		return err
	}
	low, high, log2 := h.low, h.high, h.log2
	for b := low; b < high; {
		if len(cc.Blobs)+cc.Skipped >= maxBlobs {
			return fmt.Errorf("code heap %#x: %w (%d blobs)", heap, ErrTooMany, maxBlobs)
		}
		segs, err := vm.r.U64(b+c.headerLength, "HeapBlock length")
		if err != nil {
			return err
		}
		if segs == 0 {
			// Past the last block ever allocated (CodeHeap's
			// _next_segment, which VMStructs does not publish): the
			// committed memory there is still zero.
			return nil
		}
		if segs > (high-b)>>log2 {
			return fmt.Errorf("code heap %#x: block at %#x of %d segments: past the heap's end %#x", heap, b, segs, high)
		}
		used, err := vm.r.U8(b+c.headerUsed, "HeapBlock used")
		if err != nil {
			return err
		}
		if used != 0 {
			if blob, err := vm.blob(c, b+c.heapBlockSize, names); err == nil {
				cc.Blobs = append(cc.Blobs, blob)
			} else {
				cc.Skipped++
			}
		}
		b += segs << log2
	}
	return nil
}

// blob reads the CodeBlob at addr.
func (vm *VM) blob(c *codeOffsets, addr uint64, names map[uint64]string) (Blob, error) {
	b := Blob{addr: addr}
	var err error
	if b.Start, err = vm.r.U64(addr+c.blobCodeBegin, "CodeBlob::_code_begin"); err != nil {
		return b, err
	}
	if b.End, err = vm.r.U64(addr+c.blobCodeEnd, "CodeBlob::_code_end"); err != nil {
		return b, err
	}
	if b.End < b.Start || b.End-b.Start > 1<<30 {
		return b, fmt.Errorf("code blob %#x: code [%#x, %#x)", addr, b.Start, b.End)
	}
	fs, err := vm.r.U32(addr+c.blobFrameSize, "CodeBlob::_frame_size")
	if err != nil {
		return b, err
	}
	if int32(fs) > 0 && fs < 1<<20 {
		b.FrameSize = uint64(fs) * 8 // in words
	}
	np, err := vm.r.U64(addr+c.blobName, "CodeBlob::_name")
	if err != nil {
		return b, err
	}
	kind, ok := names[np]
	if !ok {
		if kind, err = vm.r.CString(np, maxVMName, "CodeBlob name"); err != nil {
			return b, err
		}
		names[np] = kind
	}
	b.Name = kind
	if kind != "nmethod" && kind != "native nmethod" {
		return b, nil
	}
	mp, err := vm.r.U64(addr+c.cmMethod, "CompiledMethod::_method")
	if err != nil {
		return b, err
	}
	if b.Method, err = vm.method(c, mp); err != nil {
		return b, err
	}
	lvl, err := vm.r.U32(addr+c.nmLevel, "nmethod::_comp_level")
	if err != nil {
		return b, err
	}
	b.Level = int(int32(lvl))
	b.Name = b.Method.PerfMapName()
	return b, nil
}

// method reads a Method's class, name and signature.
func (vm *VM) method(c *codeOffsets, addr uint64) (*Method, error) {
	if vm.methods == nil {
		vm.methods = map[uint64]*Method{}
	}
	if m, ok := vm.methods[addr]; ok {
		return m, nil
	}
	cm, err := vm.r.U64(addr+c.mConst, "Method::_constMethod")
	if err != nil {
		return nil, err
	}
	cp, err := vm.r.U64(cm+c.cmConstants, "ConstMethod::_constants")
	if err != nil {
		return nil, err
	}
	holder, err := vm.r.U64(cp+vm.o.cpHolder, "ConstantPool::_pool_holder")
	if err != nil {
		return nil, err
	}
	cls, err := vm.className(holder)
	if err != nil {
		return nil, err
	}
	m := &Method{Class: externalClass(cls), Addr: addr}
	flags, err := vm.r.U32(addr+c.mAccess, "Method::_access_flags")
	if err != nil {
		return nil, err
	}
	m.IsNative = flags&accNative != 0
	ni, err := vm.r.U16(cm+c.cmName, "ConstMethod::_name_index")
	if err != nil {
		return nil, err
	}
	if m.Name, err = vm.cpSymbol(cp, ni); err != nil {
		return nil, err
	}
	si, err := vm.r.U16(cm+c.cmSignature, "ConstMethod::_signature_index")
	if err != nil {
		return nil, err
	}
	if m.Signature, err = vm.cpSymbol(cp, si); err != nil {
		return nil, err
	}
	if fi, err := vm.r.U16(cp+c.cpSourceFile, "ConstantPool::_source_file_name_index"); err == nil && fi != 0 {
		m.File, _ = vm.cpSymbol(cp, fi)
	}
	vm.methods[addr] = m
	return m, nil
}

// PerfMapName spells the method as HotSpot's perf map does
// (Method::external_name): "java.lang.Object java.util.HashMap.get(java.lang.Object)".
func (m *Method) PerfMapName() string {
	params, ret, err := decodeDescriptor(m.Signature)
	if err != nil {
		return m.Class + "." + m.Name + m.Signature
	}
	return ret + " " + m.Class + "." + m.Name + "(" + strings.Join(params, ", ") + ")"
}

// accNative is the class file's ACC_NATIVE (JVMS §4.6).
const accNative = 0x0100

var errDescriptor = errors.New("not a method descriptor")

// decodeDescriptor turns a method descriptor ("(I[Ljava/lang/String;)V",
// JVMS §4.3.3) into Java type names.
func decodeDescriptor(d string) (params []string, ret string, err error) {
	if !strings.HasPrefix(d, "(") {
		return nil, "", errDescriptor
	}
	rest := d[1:]
	for rest != "" && rest[0] != ')' {
		var t string
		if t, rest, err = fieldType(rest); err != nil {
			return nil, "", err
		}
		params = append(params, t)
	}
	if rest == "" {
		return nil, "", errDescriptor
	}
	ret, rest, err = fieldType(rest[1:])
	if err != nil || rest != "" {
		return nil, "", errDescriptor
	}
	return params, ret, nil
}

var baseTypes = map[byte]string{
	'B': "byte", 'C': "char", 'D': "double", 'F': "float", 'I': "int",
	'J': "long", 'S': "short", 'Z': "boolean", 'V': "void",
}

// fieldType decodes the first type of s.
func fieldType(s string) (string, string, error) {
	dims := 0
	for dims < len(s) && s[dims] == '[' {
		dims++
	}
	if dims == len(s) || dims > 255 {
		return "", "", errDescriptor
	}
	s = s[dims:]
	var t string
	if s[0] == 'L' {
		end := strings.IndexByte(s, ';')
		if end < 2 {
			return "", "", errDescriptor
		}
		t, s = externalClass(s[1:end]), s[end+1:]
	} else if bt, ok := baseTypes[s[0]]; ok {
		t, s = bt, s[1:]
	} else {
		return "", "", errDescriptor
	}
	return t + strings.Repeat("[]", dims), s, nil
}
