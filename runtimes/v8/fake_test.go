package v8

import (
	"encoding/binary"
	"fmt"
	"unicode/utf16"
)

// node20 are the constants of Node.js 20.20.2's V8 (11.3.244.8) that the
// reader uses, as its binary's v8dbg_* symbols hold them (read with
// objfile.File.DataInts; TestNodeConstants checks that the node on the
// machine agrees where it is that version).
func node20() Constants {
	c := Constants{
		versionMajor: 11, versionMinor: 3, versionBuild: 244, versionPatch: 8,
		"v8dbg_CodeKindBaseline": 11, "v8dbg_CodeKindFieldMask": 15, "v8dbg_CodeKindFieldShift": 0,
		"v8dbg_ConsStringTag":                                              1,
		"v8dbg_DeoptimizationDataInlinedFunctionCountIndex":                1,
		"v8dbg_DeoptimizationDataInliningPositionsIndex":                   7,
		"v8dbg_DeoptimizationDataLiteralArrayIndex":                        2,
		"v8dbg_DeoptimizationDataSharedFunctionInfoIndex":                  6,
		"v8dbg_ExternalStringTag":                                          2,
		"v8dbg_FirstNonstringType":                                         128,
		"v8dbg_FirstContextType":                                           205,
		"v8dbg_LastContextType":                                            214,
		"v8dbg_HeapObjectTag":                                              1,
		"v8dbg_HeapObjectTagMask":                                          3,
		"v8dbg_OneByteStringTag":                                           8,
		"v8dbg_SeqStringTag":                                               0,
		"v8dbg_SlicedStringTag":                                            3,
		"v8dbg_SmiShiftSize":                                               31,
		"v8dbg_SmiTag":                                                     0,
		"v8dbg_SmiTagMask":                                                 1,
		"v8dbg_StringEncodingMask":                                         8,
		"v8dbg_StringRepresentationMask":                                   7,
		"v8dbg_SystemPointerSize":                                          8,
		"v8dbg_TaggedSize":                                                 8,
		"v8dbg_ThinStringTag":                                              5,
		"v8dbg_class_BytecodeArray__data__uintptr_t":                       54,
		"v8dbg_class_Code__deoptimization_data__FixedArray":                16,
		"v8dbg_class_Code__source_position_table__ByteArray":               24,
		"v8dbg_class_ConsString__first__String":                            16,
		"v8dbg_class_ConsString__second__String":                           24,
		"v8dbg_class_ExternalString__resource__Object":                     16,
		"v8dbg_class_FixedArrayBase__length__SMI":                          8,
		"v8dbg_class_FixedArray__data__uintptr_t":                          16,
		"v8dbg_class_HeapObject__map__Map":                                 0,
		"v8dbg_class_InstructionStream__instruction_start__uintptr_t":      16,
		"v8dbg_class_JSFunction__shared__SharedFunctionInfo":               24,
		"v8dbg_class_Map__instance_type__uint16_t":                         12,
		"v8dbg_class_Script__line_ends__Object":                            56,
		"v8dbg_class_Script__name__Object":                                 16,
		"v8dbg_class_Script__source__Object":                               8,
		"v8dbg_class_SeqOneByteString__chars__char":                        16,
		"v8dbg_class_SharedFunctionInfo__name_or_scope_info__Object":       16,
		"v8dbg_class_SharedFunctionInfo__script_or_debug_info__HeapObject": 32,
		"v8dbg_class_SlicedString__offset__SMI":                            24,
		"v8dbg_class_SlicedString__parent__String":                         16,
		"v8dbg_class_String__length__int32_t":                              12,
		"v8dbg_class_ThinString__actual__String":                           16,
		"v8dbg_off_fp_bytecode_array":                                      -32,
		"v8dbg_off_fp_bytecode_offset":                                     -40,
		"v8dbg_off_fp_context_or_frame_type":                               -8,
		"v8dbg_off_fp_function":                                            -16,
		"v8dbg_scopeinfo_idx_first_vars":                                   3,
		"v8dbg_scopeinfo_idx_ncontextlocals":                               2,
		"v8dbg_type_ByteArray__BYTE_ARRAY_TYPE":                            190,
		"v8dbg_type_BytecodeArray__BYTECODE_ARRAY_TYPE":                    191,
		"v8dbg_type_Code__CODE_TYPE":                                       245,
		"v8dbg_type_FixedArray__FIXED_ARRAY_TYPE":                          175,
		"v8dbg_type_InstructionStream__INSTRUCTION_STREAM_TYPE":            252,
		"v8dbg_type_JSFunction__JS_FUNCTION_TYPE":                          2066,
		"v8dbg_type_ScopeInfo__SCOPE_INFO_TYPE":                            261,
		"v8dbg_type_Script__SCRIPT_TYPE":                                   167,
		"v8dbg_type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE":         262,
		"v8dbg_type_WeakFixedArray__WEAK_FIXED_ARRAY_TYPE":                 240,
	}
	for name, v := range map[string]int64{"EntryFrame": 1, "ExitFrame": 3, "BuiltinExitFrame": 25, "InternalFrame": 22,
		"ConstructFrame": 23, "StubFrame": 17, "InterpretedFrame": 13, "BaselineFrame": 14, "TurbofanFrame": 16} {
		c["v8dbg_frametype_"+name] = v
	}
	return c
}

// Instance types of the fake heap beyond those node20 names.
const (
	typeMap           = 255
	typeOneByteString = 40 // SEQ | ONE_BYTE, not internalized
	typeTwoByteString = 32
	typeConsString    = 41
	typeThinString    = 45
	typeSlicedString  = 43
	typeExternal      = 42
	typeOddball       = 131
	typeFeedback      = 249
	typeContext       = 210 // FUNCTION_CONTEXT_TYPE, one of the context types
)

// fakeHeap is a V8 heap built by a test: objects laid out as Node.js 20
// lays them out, at addresses from base. It is the memory the reader
// reads, and the seed of the fuzz corpus.
type fakeHeap struct {
	base uint64
	mem  []byte
	maps map[uint16]uint64
	l    *Layout
}

const fakeBase = 0x10000

func newFakeHeap(l *Layout) *fakeHeap {
	return &fakeHeap{base: fakeBase, maps: map[uint16]uint64{}, l: l}
}

// ReadAt reads the heap as a process's memory: whole pages, the rest of
// the last one zero.
func (f *fakeHeap) ReadAt(p []byte, addr uint64) (int, error) {
	end := f.base + (uint64(len(f.mem))+4095)&^4095
	if addr < f.base || addr >= end || end-addr < uint64(len(p)) {
		return 0, fmt.Errorf("%#x unmapped", addr)
	}
	clear(p)
	if addr-f.base < uint64(len(f.mem)) {
		copy(p, f.mem[addr-f.base:])
	}
	return len(p), nil
}

// alloc reserves n bytes, 8-aligned, and returns their address.
func (f *fakeHeap) alloc(n int) uint64 {
	a := f.base + uint64(len(f.mem))
	f.mem = append(f.mem, make([]byte, (n+7)&^7)...)
	return a
}

func (f *fakeHeap) put64(a, v uint64) { binary.LittleEndian.PutUint64(f.mem[a-f.base:], v) }
func (f *fakeHeap) put32(a uint64, v uint32) {
	binary.LittleEndian.PutUint32(f.mem[a-f.base:], v)
}
func (f *fakeHeap) put16(a uint64, v uint16) {
	binary.LittleEndian.PutUint16(f.mem[a-f.base:], v)
}

func smi(v int64) uint64 { return uint64(v) << 32 }

// mapOf is the tagged Map of instance type t.
func (f *fakeHeap) mapOf(t uint16) uint64 {
	if m, ok := f.maps[t]; ok {
		return m
	}
	a := f.alloc(80)
	f.maps[t] = a | 1
	if t == typeMap {
		f.put64(a, a|1) // the meta map is its own map
	} else {
		f.put64(a, f.mapOf(typeMap))
	}
	f.put16(a+12, t)
	return a | 1
}

// object allocates an object of type t with size bytes (map included).
func (f *fakeHeap) object(t uint16, size int) (tagged, addr uint64) {
	a := f.alloc(size)
	f.put64(a, f.mapOf(t))
	return a | 1, a
}

func (f *fakeHeap) str(s string) uint64 {
	v, a := f.object(typeOneByteString, 16+len(s))
	f.put32(a+12, uint32(len(s)))
	copy(f.mem[a+16-f.base:], s)
	return v
}

func (f *fakeHeap) twoByte(s string) uint64 {
	u := utf16.Encode([]rune(s))
	v, a := f.object(typeTwoByteString, 16+2*len(u))
	f.put32(a+12, uint32(len(u)))
	for i, c := range u {
		f.put16(a+16+uint64(2*i), c)
	}
	return v
}

// cons makes a ConsString of first and second; length is theirs.
func (f *fakeHeap) cons(first, second uint64, length int) uint64 {
	v, a := f.object(typeConsString, 32)
	f.put32(a+12, uint32(length))
	f.put64(a+16, first)
	f.put64(a+24, second)
	return v
}

func (f *fakeHeap) thin(actual uint64, length int) uint64 {
	v, a := f.object(typeThinString, 24)
	f.put32(a+12, uint32(length))
	f.put64(a+16, actual)
	return v
}

func (f *fakeHeap) sliced(parent uint64, off, length int) uint64 {
	v, a := f.object(typeSlicedString, 32)
	f.put32(a+12, uint32(length))
	f.put64(a+16, parent)
	f.put64(a+24, smi(int64(off)))
	return v
}

// external makes a cached external one-byte string whose characters are
// elsewhere in the heap, as an embedder's resource holds them.
func (f *fakeHeap) external(s string) uint64 {
	data := f.alloc(len(s))
	copy(f.mem[data-f.base:], s)
	v, a := f.object(typeExternal, 32)
	f.put32(a+12, uint32(len(s)))
	f.put64(a+24, data)
	return v
}

func (f *fakeHeap) oddball() uint64 { v, _ := f.object(typeOddball, 48); return v }

// fixedArray makes a FixedArray (or another array type) of words.
func (f *fakeHeap) fixedArray(t uint16, words []uint64) uint64 {
	v, a := f.object(t, 16+8*len(words))
	f.put64(a+8, smi(int64(len(words))))
	for i, w := range words {
		f.put64(a+16+uint64(8*i), w)
	}
	return v
}

func (f *fakeHeap) byteArray(b []byte) uint64 {
	v, a := f.object(190, 16+len(b))
	f.put64(a+8, smi(int64(len(b))))
	copy(f.mem[a+16-f.base:], b)
	return v
}

// scopeInfo makes a ScopeInfo: flags, parameter count, the context
// locals (names and infos, or a hash table past 75), then a saved class
// variable slot, the function variable (name, or Smi 0, and its index),
// the inferred name (a string or undefined), the position info.
func (f *fakeHeap) scopeInfo(locals int, name, inferred uint64, more ...uint64) uint64 {
	var slots []uint64
	slots = append(slots, smi(0), smi(1), smi(int64(locals)))
	if locals < inlinedLocalNames {
		for i := range locals {
			slots = append(slots, f.str(fmt.Sprintf("local%d", i)))
		}
	} else {
		slots = append(slots, f.fixedArray(175, nil)) // the names' hash table
	}
	for range locals {
		slots = append(slots, smi(7))
	}
	slots = append(slots, smi(0), name, smi(3), inferred, smi(10), smi(99))
	slots = append(slots, more...)
	v, a := f.object(261, 8+8*len(slots))
	for i, s := range slots {
		f.put64(a+8+uint64(8*i), s)
	}
	return v
}

// script makes a Script named name with source; with lineEnds, V8's
// table of line ends too (else undefined, as before V8 needed one).
func (f *fakeHeap) script(name, source uint64, lineEnds []int64, lineOffset int64) uint64 {
	v, a := f.object(167, 104)
	f.put64(a+8, source)
	f.put64(a+16, name)
	f.put64(a+24, smi(lineOffset))
	f.put64(a+32, smi(0))
	if lineEnds != nil {
		w := make([]uint64, len(lineEnds))
		for i, e := range lineEnds {
			w[i] = smi(e)
		}
		f.put64(a+56, f.fixedArray(175, w))
	} else {
		f.put64(a+56, f.oddball())
	}
	return v
}

func (f *fakeHeap) sfi(nameOrScope, script uint64) uint64 {
	v, a := f.object(262, 56)
	f.put64(a+16, nameOrScope)
	f.put64(a+32, script)
	return v
}

func (f *fakeHeap) function(t uint16, sfi uint64) (tagged, addr uint64) {
	v, a := f.object(t, 64)
	f.put64(a+24, sfi)
	return v, a
}

// bytecodeArray makes a BytecodeArray of bytecodes with a source
// position table (or undefined when spt is nil).
func (f *fakeHeap) bytecodeArray(bytecodes, spt []byte) uint64 {
	v, a := f.object(191, 54+len(bytecodes))
	f.put64(a+8, smi(int64(len(bytecodes))))
	if spt != nil {
		f.put64(a+32, f.byteArray(spt))
	} else {
		f.put64(a+32, f.oddball())
	}
	copy(f.mem[a+54-f.base:], bytecodes)
	return v
}

// context makes a Context.
func (f *fakeHeap) context() uint64 { v, _ := f.object(typeContext, 32); return v }

// frame makes a frame's slots: the context or marker, the function, the
// bytecode array and the offset; returns the frame pointer.
func (f *fakeHeap) frame(marker, function, bytecode, offset uint64) uint64 {
	a := f.alloc(64)
	fp := a + 48
	f.put64(fp-8, marker)
	f.put64(fp-16, function)
	f.put64(fp-32, bytecode)
	f.put64(fp-40, offset)
	return fp
}

// code makes an optimized Code of kind whose instructions (size bytes)
// follow its InstructionStream's header; spt is its source position
// table, deopt its deoptimization data. It returns the Code and the
// instructions' start.
func (f *fakeHeap) code(kind uint32, size int, spt []byte, deopt uint64) (tagged, start uint64) {
	isV, isA := f.object(252, 16+size)
	v, a := f.object(245, 64)
	f.put64(isA+8, v)
	f.put64(a+16, deopt)
	f.put64(a+24, f.byteArray(spt))
	f.put64(a+32, isV)
	f.put64(a+40, isA+16)
	f.put32(a+48, kind)
	f.put32(a+56, uint32(size))
	return v, isA + 16
}

// positions encodes a source position table as V8 does: each entry the
// zig-zag VLQ code offset delta (negated minus one for an expression)
// and the position delta.
func positions(entries ...[2]int64) []byte {
	var b []byte
	code, pos := int64(-1), int64(0)
	for _, e := range entries {
		b = appendVLQ(b, e[0]-code)
		b = appendVLQ(b, e[1]-pos)
		code, pos = e[0], e[1]
	}
	return b
}

func appendVLQ(b []byte, v int64) []byte {
	u := uint64(v<<1) ^ uint64(v>>63)
	for {
		c := byte(u & 0x7f)
		u >>= 7
		if u == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendUVLQ(b []byte, u uint64) []byte {
	for {
		c := byte(u & 0x7f)
		u >>= 7
		if u == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// pos is a SourcePosition word for script offset off inlined at id (-1:
// not inlined).
func pos(off int64, id int) int64 { return (off+1)<<1 | int64(id+1)<<31 }
