package v8

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Constants are a V8 build's postmortem values by symbol name: the
// v8dbg_* symbols (gen-postmortem-metadata.py writes them into every
// Node.js binary: offsets of fields, instance types, frame slots, tag
// masks) and v8::internal::Version's major_, minor_, build_ and patch_,
// as objfile.File.DataInts reads them.
type Constants map[string]int64

// The mangled names of v8::internal::Version's static members.
const (
	versionMajor = "_ZN2v88internal7Version6major_E"
	versionMinor = "_ZN2v88internal7Version6minor_E"
	versionBuild = "_ZN2v88internal7Version6build_E"
	versionPatch = "_ZN2v88internal7Version6patch_E"
)

// ErrNotV8 says a process runs no V8 this reader can find: no binary of
// it (the executable, libnode) holds V8's postmortem symbols.
var ErrNotV8 = errors.New("no V8 with postmortem symbols in the process (node, libnode)")

// Symbols is what the reader needs of the binary that holds V8 (node,
// libnode.so): the values of its integer data symbols with a prefix, and
// the bytes of one data symbol. *objfile.File is one.
type Symbols interface {
	DataInts(prefix string) (map[string]int64, error)
	DataBytes(name string) ([]byte, error)
}

// bytecodeSizesSymbol is v8::internal::interpreter::Bytecodes::
// kBytecodeSizes: uint8_t[3][kBytecodeCount], each bytecode's size with
// its operands at each operand scale.
const bytecodeSizesSymbol = "_ZN2v88internal11interpreter9Bytecodes14kBytecodeSizesE"

// LoadLayout reads the layout of the V8 in a binary from its symbols.
// A binary without V8's postmortem symbols gives a *LayoutError naming
// them.
func LoadLayout(s Symbols) (*Layout, error) {
	c := Constants{}
	for _, prefix := range []string{"v8dbg_", "_ZN2v88internal7Version"} {
		m, err := s.DataInts(prefix)
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			c[k] = v
		}
	}
	sizes, err := s.DataBytes(bytecodeSizesSymbol)
	if err != nil {
		return nil, err
	}
	return NewLayout(c, sizes)
}

// Version is a V8 version: 11.3.244.8 is Node.js 20's.
type Version struct{ Major, Minor, Build, Patch int }

func (v Version) String() string {
	return fmt.Sprintf("%d.%d.%d.%d", v.Major, v.Minor, v.Build, v.Patch)
}

// atLeast reports whether v is major.minor.build or later.
func (v Version) atLeast(major, minor, build int) bool {
	if v.Major != major {
		return v.Major > major
	}
	if v.Minor != minor {
		return v.Minor > minor
	}
	return v.Build >= build
}

// Layout is what the reader knows of one V8 build: how values are
// tagged, where a frame keeps its function, the instance types it checks
// and the offsets of the fields it follows. Most come from the build's
// own constants; the few V8 stopped publishing are derived from those it
// still does, as noted where they are set, and every object reached
// through one is checked for its type before it is believed.
type Layout struct {
	Version Version

	heapObjectTag, heapObjectTagMask uint64
	smiTagMask                       uint64
	smiShift                         uint // a Smi's value is the word shifted right by this

	// Frame slots, relative to the frame pointer.
	fpMarker, fpFunction, fpBytecodeArray, fpBytecodeOffset int64
	frameTypes                                              map[uint64]string // marker value → "ExitFrame"

	// Instance types.
	typeJSFunctionFirst, typeJSFunctionLast uint16
	typeSFI, typeScopeInfo, typeScript      uint16
	typeBytecodeArray, typeByteArray        uint16
	typeFixedArray                          uint16
	typeContextFirst, typeContextLast       uint16
	firstNonString                          uint16

	// String instance type bits.
	strRepMask, strSeq, strCons, strExternal, strSliced, strThin uint16
	strEncodingMask, strOneByte                                  uint16

	// Field offsets, from the start of the object (untagged).
	offMap, offInstanceType                     int64
	offJSFunctionShared                         int64
	offSFIName, offSFIScript                    int64
	offScopeInfoSlots                           int64 // ScopeInfo's first slot
	scopeNContextLocals, scopeFirstVars         int64 // slot indices
	offScriptName, offScriptSource, offLineEnds int64
	offArrayLength, offArrayData                int64 // FixedArray and ByteArray
	offBytecodeSPT, offBytecodeData             int64
	offStrLength, offSeqChars                   int64
	offConsFirst, offConsSecond                 int64
	offThinActual                               int64
	offSlicedParent, offSlicedOffset            int64
	offExternalResource                         int64

	// bytecodeSizes is kBytecodeSizes (3 rows of one byte per bytecode),
	// nil when the build has none that is sane.
	bytecodeSizes []byte

	// code is how optimized code is laid out, nil when this reader does
	// not know it for this version (codeErr says so).
	code    *codeLayout
	codeErr error
}

// codeLayout is where a Code object and its InstructionStream keep what
// the lines of optimized code need.
type codeLayout struct {
	typeCode, typeIStream, typeWeakFixedArray uint16
	offJSFunctionCode                         int64
	offDeopt, offSPT, offIStream              int64
	offStart, offFlags, offSize               int64
	kindMask, kindShift, kindBaseline         uint32
	offIStreamCode, offIStreamStart           int64
	deoptInlinedCount, deoptLiterals          int64 // DeoptimizationData indices
	deoptSFI, deoptInlining                   int64
}

// LayoutError says why a build cannot be read: the constants it lacks, or
// what it does that this reader does not follow.
type LayoutError struct {
	Version Version
	// Missing are the v8dbg_ symbols needed and absent.
	Missing []string
	// Unsupported, when not empty, says what the build does differently.
	Unsupported string
}

func (e *LayoutError) Error() string {
	what := e.Unsupported
	if len(e.Missing) > 0 {
		what = "no postmortem symbol " + strings.Join(e.Missing, ", ")
	}
	if e.Version == (Version{}) {
		return "V8 of unknown version: " + what
	}
	return "V8 " + e.Version.String() + ": " + what
}

// jsFunctionSubtypes is how many instance types after JS_FUNCTION_TYPE
// are JSFunctions too (class constructors, the Array, Promise, RegExp and
// typed array constructors) since V8 9.6.138; V8 publishes only the
// first.
const jsFunctionSubtypes = 15

// NewLayout reads a build's layout from its constants and its table of
// bytecode sizes (nil when it has none: baseline code then has no lines).
func NewLayout(c Constants, bytecodeSizes []byte) (*Layout, error) {
	l := &Layout{Version: Version{
		Major: int(c[versionMajor]), Minor: int(c[versionMinor]),
		Build: int(c[versionBuild]), Patch: int(c[versionPatch]),
	}}
	g := getter{c: c}
	l.heapObjectTag = uint64(g.get("HeapObjectTag"))
	l.heapObjectTagMask = uint64(g.get("HeapObjectTagMask"))
	l.smiTagMask = uint64(g.get("SmiTagMask"))
	smiTag := g.get("SmiTag")
	smiShiftSize := g.get("SmiShiftSize")
	tagged := g.get("TaggedSize")
	pointer := g.get("SystemPointerSize")

	l.fpMarker = g.get("off_fp_context_or_frame_type")
	l.fpFunction = g.get("off_fp_function")
	l.fpBytecodeArray = g.get("off_fp_bytecode_array")
	l.fpBytecodeOffset = g.get("off_fp_bytecode_offset")

	jsFunction := g.get("type_JSFunction__JS_FUNCTION_TYPE")
	l.typeSFI = uint16(g.get("type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE"))
	l.typeScopeInfo = uint16(g.get("type_ScopeInfo__SCOPE_INFO_TYPE"))
	l.typeScript = uint16(g.get("type_Script__SCRIPT_TYPE"))
	l.typeBytecodeArray = uint16(g.get("type_BytecodeArray__BYTECODE_ARRAY_TYPE"))
	l.typeByteArray = uint16(g.get("type_ByteArray__BYTE_ARRAY_TYPE"))
	l.typeFixedArray = uint16(g.get("type_FixedArray__FIXED_ARRAY_TYPE"))
	l.firstNonString = uint16(g.get("FirstNonstringType"))
	l.typeContextFirst = uint16(g.get("FirstContextType"))
	l.typeContextLast = uint16(g.get("LastContextType"))

	l.strRepMask = uint16(g.get("StringRepresentationMask"))
	l.strSeq = uint16(g.get("SeqStringTag"))
	l.strCons = uint16(g.get("ConsStringTag"))
	l.strExternal = uint16(g.get("ExternalStringTag"))
	l.strSliced = uint16(g.get("SlicedStringTag"))
	l.strThin = uint16(g.get("ThinStringTag"))
	l.strEncodingMask = uint16(g.get("StringEncodingMask"))
	l.strOneByte = uint16(g.get("OneByteStringTag"))

	l.offMap = g.get("class_HeapObject__map__Map")
	l.offInstanceType = g.get("class_Map__instance_type__uint16_t")
	l.offJSFunctionShared = g.get("class_JSFunction__shared__SharedFunctionInfo")
	l.offSFIName = g.get("class_SharedFunctionInfo__name_or_scope_info__Object")
	l.offSFIScript = g.any("class_SharedFunctionInfo__script_or_debug_info__HeapObject", "class_SharedFunctionInfo__script_or_debug_info__Object")
	l.scopeNContextLocals = g.get("scopeinfo_idx_ncontextlocals")
	l.scopeFirstVars = g.get("scopeinfo_idx_first_vars")
	l.offScriptName = g.get("class_Script__name__Object")
	l.offScriptSource = g.get("class_Script__source__Object")
	l.offLineEnds = g.get("class_Script__line_ends__Object")
	l.offArrayLength = g.get("class_FixedArrayBase__length__SMI")
	l.offArrayData = g.get("class_FixedArray__data__uintptr_t")
	l.offBytecodeData = g.get("class_BytecodeArray__data__uintptr_t")
	l.offStrLength = g.get("class_String__length__int32_t")
	l.offSeqChars = g.get("class_SeqOneByteString__chars__char")
	l.offConsFirst = g.get("class_ConsString__first__String")
	l.offConsSecond = g.get("class_ConsString__second__String")
	l.offThinActual = g.get("class_ThinString__actual__String")
	l.offSlicedParent = g.get("class_SlicedString__parent__String")
	l.offSlicedOffset = g.get("class_SlicedString__offset__SMI")
	l.offExternalResource = g.get("class_ExternalString__resource__Object")
	if len(g.missing) > 0 {
		sort.Strings(g.missing)
		return nil, &LayoutError{Version: l.Version, Missing: g.missing}
	}

	// Node.js builds V8 without pointer compression: tagged fields are
	// whole pointers. With it they are 32-bit offsets from a cage base
	// that no postmortem symbol gives.
	if tagged != 8 || pointer != 8 {
		return nil, &LayoutError{Version: l.Version, Unsupported: fmt.Sprintf("tagged values of %d bytes and pointers of %d (pointer compression, or a 32-bit build) are not read", tagged, pointer)}
	}
	if smiTag != 0 || l.smiTagMask != 1 || l.heapObjectTagMask != 3 || l.heapObjectTag != 1 {
		return nil, &LayoutError{Version: l.Version, Unsupported: fmt.Sprintf("tagging scheme heap object %d/%d, Smi %d/%d", l.heapObjectTag, l.heapObjectTagMask, smiTag, l.smiTagMask)}
	}
	if smiShiftSize < 0 || smiShiftSize > 31 {
		return nil, &LayoutError{Version: l.Version, Unsupported: fmt.Sprintf("Smi shift %d", smiShiftSize)}
	}
	l.smiShift = uint(smiShiftSize) + 1 // kSmiTagSize: the tag mask is one bit
	if jsFunction <= 0 || jsFunction > 0xffff-jsFunctionSubtypes {
		return nil, &LayoutError{Version: l.Version, Unsupported: fmt.Sprintf("JS_FUNCTION_TYPE %d", jsFunction)}
	}
	l.typeJSFunctionFirst = uint16(jsFunction)
	l.typeJSFunctionLast = uint16(jsFunction + jsFunctionSubtypes)

	// ScopeInfo has been a HeapObject of slots after its map since V8
	// 9.1 (a FixedArray before: its slots came after the length).
	if _, ok := c["v8dbg_parent_ScopeInfo__HeapObject"]; ok || l.Version.atLeast(9, 1, 0) {
		l.offScopeInfoSlots = l.offMap + tagged
	} else {
		l.offScopeInfoSlots = l.offArrayData
	}
	// BytecodeArray's source_position_table has no symbol since V8 9.4:
	// it is the third field after the length (constant_pool,
	// handler_table, source_position_table; bytecode-array.tq).
	l.offBytecodeSPT = l.offArrayLength + 3*tagged
	l.frameTypes = frameTypes(c)
	l.code, l.codeErr = newCodeLayout(l, c)
	l.bytecodeSizes = checkBytecodeSizes(bytecodeSizes)
	return l, nil
}

// newCodeLayout reads how optimized code is laid out. V8 11 split the
// old Code object in two (a Code with the metadata, an InstructionStream
// with the instructions) and stopped publishing most of Code's offsets;
// they are derived here from those it still publishes as the Code of
// V8 11.1.204 to 11.4.58 has them (Node.js 20 runs 11.3), read from a
// live Node.js 20 and checked on every use: the Code's type, its
// InstructionStream pointing back at it, the frame's pc inside its
// instructions. Other versions are not guessed at: their optimized
// frames are named without lines and inlined calls.
func newCodeLayout(l *Layout, c Constants) (*codeLayout, error) {
	if !l.Version.atLeast(11, 1, 204) || l.Version.atLeast(11, 4, 59) {
		return nil, fmt.Errorf("V8 %s: the layout of its optimized code is not known to this reader (only 11.1.204 to 11.4.58's, Node.js 20's)", l.Version)
	}
	g := getter{c: c}
	cl := &codeLayout{
		typeCode:           uint16(g.get("type_Code__CODE_TYPE")),
		typeIStream:        uint16(g.get("type_InstructionStream__INSTRUCTION_STREAM_TYPE")),
		typeWeakFixedArray: uint16(g.get("type_WeakFixedArray__WEAK_FIXED_ARRAY_TYPE")),
		offDeopt:           g.get("class_Code__deoptimization_data__FixedArray"),
		offSPT:             g.get("class_Code__source_position_table__ByteArray"),
		kindMask:           uint32(g.get("CodeKindFieldMask")),
		kindShift:          uint32(g.get("CodeKindFieldShift")),
		kindBaseline:       uint32(g.get("CodeKindBaseline")),
		offIStreamStart:    g.get("class_InstructionStream__instruction_start__uintptr_t"),
		deoptInlinedCount:  g.get("DeoptimizationDataInlinedFunctionCountIndex"),
		deoptLiterals:      g.get("DeoptimizationDataLiteralArrayIndex"),
		deoptSFI:           g.get("DeoptimizationDataSharedFunctionInfoIndex"),
		deoptInlining:      g.get("DeoptimizationDataInliningPositionsIndex"),
	}
	if len(g.missing) > 0 {
		return nil, &LayoutError{Version: l.Version, Missing: g.missing}
	}
	// code follows context and feedback_cell after shared (js-function.tq
	// before 11.7.368).
	cl.offJSFunctionCode = l.offJSFunctionShared + 3*8
	// Code: source_position_table, then the InstructionStream, the
	// instruction start (a pointer since 11.1.204), flags (uint32),
	// builtin id and kind-specific flags (two uint16s, until 11.4.59),
	// the instruction size (int32).
	cl.offIStream = cl.offSPT + 8
	cl.offStart = cl.offIStream + 8
	cl.offFlags = cl.offStart + 8
	cl.offSize = cl.offFlags + 8
	// InstructionStream: its map, then the Code it belongs to.
	cl.offIStreamCode = l.offMap + 8
	if cl.offIStreamStart != cl.offIStreamCode+8 {
		return nil, fmt.Errorf("V8 %s: InstructionStream's instructions at %d, not after its map and Code", l.Version, cl.offIStreamStart)
	}
	return cl, nil
}

// frameTypes maps each frame marker to its type's name: V8 marks a typed
// frame with StackFrame::TypeToMarker(type), the type shifted past the
// Smi tag.
func frameTypes(c Constants) map[uint64]string {
	m := map[uint64]string{}
	for name, v := range c {
		if t, ok := strings.CutPrefix(name, "v8dbg_frametype_"); ok && v >= 0 && v < 256 {
			m[uint64(v)<<1] = t
		}
	}
	return m
}

// getter reads constants and remembers those missing.
type getter struct {
	c       Constants
	missing []string
}

func (g *getter) get(name string) int64 { return g.any(name) }

// any returns the first of names present (V8 renamed some fields).
func (g *getter) any(names ...string) int64 {
	for _, n := range names {
		if v, ok := g.c["v8dbg_"+n]; ok {
			return v
		}
	}
	g.missing = append(g.missing, "v8dbg_"+names[0])
	return 0
}

// checkBytecodeSizes keeps a table of bytecode sizes that can be one: three
// rows of at most 256 bytecodes, each of 1 to 32 bytes.
func checkBytecodeSizes(b []byte) []byte {
	if len(b) == 0 || len(b)%3 != 0 || len(b) > 3*256 {
		return nil
	}
	for _, n := range b {
		if n == 0 || n > 32 {
			return nil
		}
	}
	return b
}
