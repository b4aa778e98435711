package cpython

// Layout is where the fields this package reads lie in one CPython
// version's structures, in bytes from the start of each structure, on
// x86-64 and arm64 (LP64: the two agree). A field a version does not have
// is -1.
//
// The tables below were derived from each version's own headers, the
// ones its builds install (Include/cpython/*.h and Include/internal/*.h):
// testdata/offsets.c prints offsetof() of every field when compiled
// against a version's headers, and TestLayoutsMatchHeaders compares what
// it prints with these tables for every version installed on the machine.
// CPython 3.13 also publishes the same facts in the target's memory
// (_Py_DebugOffsets, at the start of _PyRuntime): where it does, the
// offsets are taken from there (see debugOffsets) and checked against the
// table.
type Layout struct {
	// _PyRuntimeState (Include/internal/pycore_runtime.h; 3.8:
	// pycore_pystate.h): interpreters.head; gilstate.tstate_current, the
	// thread state holding the GIL (3.8–3.11); ceval.gil, the one GIL
	// (3.8–3.11: it moved to each interpreter in 3.12).
	RuntimeInterpretersHead int64
	RuntimeTstateCurrent    int64
	RuntimeGIL              int64

	// PyInterpreterState (struct _is, pycore_interp.h; 3.8:
	// pycore_pystate.h): next, the head of its thread states (tstate_head
	// before 3.11, threads.head since), id, and ceval.gil (3.12+: a
	// pointer to the GIL this interpreter uses).
	InterpNext        int64
	InterpThreadsHead int64
	InterpID          int64
	InterpGIL         int64

	// PyThreadState (struct _ts, Include/cpython/pystate.h): next,
	// interp, thread_id (pthread_self()), native_thread_id (the kernel's
	// tid, 3.11+), and the current frame: frame (a PyFrameObject, 3.8–3.10),
	// cframe (3.11, 3.12: a _PyCFrame whose current_frame, at
	// CFrameCurrentFrame, is the _PyInterpreterFrame) or current_frame
	// (3.13).
	ThreadNext         int64
	ThreadInterp       int64
	ThreadFrame        int64
	CFrameCurrentFrame int64
	ThreadID           int64
	ThreadNativeID     int64

	// struct _gil_runtime_state (Include/internal/pycore_gil.h; the same
	// in every version read): last_holder, locked, switch_number, and the
	// condition variable and mutex that threads wanting the GIL wait on
	// (take_gil), with their sizes.
	GILLastHolder   int64
	GILLocked       int64
	GILSwitchNumber int64
	GILCond         int64
	GILCondSize     int64
	GILMutex        int64
	GILMutexSize    int64

	// The frame: PyFrameObject (Include/cpython/frameobject.h, 3.8–3.10:
	// f_back, f_code, f_lasti) or _PyInterpreterFrame
	// (Include/internal/pycore_frame.h, 3.11+: previous, f_code or
	// f_executable (3.13), prev_instr or instr_ptr (3.13), is_entry (3.11),
	// owner). FrameSize is what is read of one frame.
	FrameBack    int64
	FrameCode    int64
	FrameLasti   int64
	FrameInstr   int64
	FrameIsEntry int64
	FrameOwner   int64
	FrameSize    int64
	// OwnedByCStack is the owner value of the shim frame an evaluation
	// call of the interpreter pushes below its first frame
	// (FRAME_OWNED_BY_CSTACK, 3.12+); -1 before.
	OwnedByCStack int64

	// PyCodeObject (Include/cpython/code.h): co_name, co_qualname (3.11+),
	// co_filename, co_firstlineno, the line table (co_lnotab 3.8–3.9,
	// co_linetable 3.10+), _co_firsttraceable and co_code_adaptive (the
	// instructions, inline in the object, 3.11+). CodeSize is what is
	// read of one code object (sizeof(PyCodeObject)).
	CodeName           int64
	CodeQualname       int64
	CodeFilename       int64
	CodeFirstLine      int64
	CodeLineTable      int64
	CodeFirstTraceable int64
	CodeAdaptive       int64
	CodeSize           int64
	LineTable          LineTableFormat

	// PyASCIIObject, PyCompactUnicodeObject, PyUnicodeObject
	// (Include/cpython/unicodeobject.h): length, state and its bit
	// fields, the sizes after which a compact string's characters lie,
	// and data.any, the characters of a legacy string (ReadyBit: 3.8–3.11,
	// -1 since).
	UnicodeLength      int64
	UnicodeState       int64
	UnicodeASCIISize   int64
	UnicodeCompactSize int64
	UnicodeData        int64
	KindShift          int64
	CompactBit         int64
	ASCIIBit           int64
	ReadyBit           int64
}

// LineTableFormat says how a code object maps instructions to lines.
type LineTableFormat uint8

const (
	// LineTableLnotab is co_lnotab (3.8, 3.9): (bytecode offset
	// increment, signed line increment) byte pairs
	// (Objects/lnotab_notes.txt).
	LineTableLnotab LineTableFormat = iota + 1
	// LineTable310 is 3.10's co_linetable: (range length in bytes,
	// signed line delta, -128 for none) pairs (PEP 626).
	LineTable310
	// LineTableLocations is the location table of 3.11+
	// (Objects/locations.md): variable-length entries of code units,
	// line delta and columns.
	LineTableLocations
)

func (f LineTableFormat) String() string {
	switch f {
	case LineTableLnotab:
		return "co_lnotab"
	case LineTable310:
		return "co_linetable (3.10)"
	case LineTableLocations:
		return "location table (3.11+)"
	}
	return "unknown line table"
}

// What PyObject_HEAD and PyVarObject_HEAD hold, and PyBytesObject
// (Include/cpython/bytesobject.h: ob_sval after ob_shash), in every
// version read (non-debug builds: no _ob_next/_ob_prev).
const (
	offObType   = 8  // PyObject.ob_type
	offObSize   = 16 // PyVarObject.ob_size
	offBytesVal = 32 // PyBytesObject.ob_sval
	// offTypeName is PyTypeObject.tp_name (after PyObject_VAR_HEAD).
	offTypeName = 24
)

// setGIL places struct _gil_runtime_state, unchanged from 3.8 to 3.13:
// interval, last_holder, locked, switch_number, then a pthread_cond_t
// (48 bytes in glibc) and a pthread_mutex_t (40).
func setGIL(l *Layout) {
	l.GILLastHolder, l.GILLocked, l.GILSwitchNumber = 8, 16, 24
	l.GILCond, l.GILCondSize, l.GILMutex, l.GILMutexSize = 32, 48, 80, 40
}

// setUnicode311 places the strings of 3.8–3.11: PyASCIIObject ends with
// wstr (48 bytes), PyCompactUnicodeObject adds utf8_length, utf8 and
// wstr_length (72); state is interned:2, kind:3, compact:1, ascii:1,
// ready:1.
func setUnicode311(l *Layout) {
	l.UnicodeLength, l.UnicodeState, l.UnicodeASCIISize, l.UnicodeCompactSize = 16, 32, 48, 72
	l.UnicodeData, l.KindShift, l.CompactBit, l.ASCIIBit, l.ReadyBit = 72, 2, 5, 6, 7
}

// setUnicode312 places the strings since 3.12 (PEP 623 removed wstr):
// PyASCIIObject is 40 bytes, PyCompactUnicodeObject 56; state is
// interned:2, kind:3, compact:1, ascii:1, statically_allocated:1.
func setUnicode312(l *Layout) {
	l.UnicodeLength, l.UnicodeState, l.UnicodeASCIISize, l.UnicodeCompactSize = 16, 32, 40, 56
	l.UnicodeData, l.KindShift, l.CompactBit, l.ASCIIBit, l.ReadyBit = 56, 2, 5, 6, -1
}

// frameObject is PyFrameObject's prefix for 3.8–3.10, which
// PyObject_VAR_HEAD begins: f_back (24), f_code (32); f_lasti is 104 in
// 3.8 and 3.9 (after the value stack pointers, f_trace, f_trace_lines and
// f_trace_opcodes, the generator and f_lasti), 96 in 3.10 (f_stackdepth
// replaced f_stacktop).
func frameObject(lasti int64) *Layout {
	return &Layout{
		FrameBack: 24, FrameCode: 32, FrameLasti: lasti, FrameInstr: -1,
		FrameIsEntry: -1, FrameOwner: -1, FrameSize: lasti + 4, OwnedByCStack: -1,
	}
}

// layouts are the versions this package reads, by minor version of 3.
var layouts = map[int]*Layout{
	8: layout38(), 9: layout39(), 10: layout310(), 11: layout311(), 12: layout312(), 13: layout313(),
}

// layout38: _PyRuntimeState (pycore_pystate.h) opens with four ints and
// finalizing, then interpreters {mutex, head, main, next_id}; the GIL is
// ceval.gil after gc's state. struct _is opens {next, tstate_head, id}.
// struct _ts: prev, next, interp, frame … thread_id at 176.
// PyCodeObject: co_firstlineno (40) after the counts and flags,
// co_filename (104), co_name (112), co_lnotab (120).
func layout38() *Layout {
	l := frameObject(104)
	l.RuntimeInterpretersHead, l.RuntimeTstateCurrent, l.RuntimeGIL = 32, 1368, 1152
	l.InterpNext, l.InterpThreadsHead, l.InterpID, l.InterpGIL = 0, 8, 16, -1
	l.ThreadNext, l.ThreadInterp, l.ThreadFrame, l.CFrameCurrentFrame = 8, 16, 24, -1
	l.ThreadID, l.ThreadNativeID = 176, -1
	l.CodeName, l.CodeQualname, l.CodeFilename, l.CodeFirstLine = 112, -1, 104, 40
	l.CodeLineTable, l.CodeFirstTraceable, l.CodeAdaptive, l.CodeSize = 120, -1, -1, 176
	l.LineTable = LineTableLnotab
	setGIL(l)
	setUnicode311(l)
	return l
}

// layout39: _PyRuntimeState moved to pycore_runtime.h and lost the gc
// state (now per interpreter): ceval.gil at 352, gilstate.tstate_current
// at 568. struct _is (pycore_interp.h) has id at 24 (after runtime). The
// thread state and code object are 3.8's.
func layout39() *Layout {
	l := layout38()
	l.RuntimeGIL, l.RuntimeTstateCurrent = 352, 568
	l.InterpID = 24
	return l
}

// layout310: the runtime and interpreter prefixes are 3.9's; PyFrameObject
// lost f_stacktop for f_stackdepth (f_lasti at 96, now counted in code
// units); co_lnotab became co_linetable (PEP 626) at the same place.
func layout310() *Layout {
	l := layout39()
	l.FrameLasti, l.FrameSize = 96, 100
	l.LineTable = LineTable310
	return l
}

// layout311: _PyRuntimeState gained _initialized before the four ints
// (interpreters.head at 40, ceval.gil at 360, gilstate.tstate_current at
// 576). struct _is: next, then threads {next_unique_id, head, …}, id at
// 48. struct _ts: cframe at 56 (_PyCFrame: use_tracing, current_frame at
// 8, previous), thread_id 152, native_thread_id 160. _PyInterpreterFrame:
// f_func, f_globals, f_builtins, f_locals, f_code (32), frame_obj,
// previous (48), prev_instr (56), stacktop, is_entry (68), owner (69),
// localsplus (72). PyCodeObject: co_firstlineno 72, co_filename 112,
// co_name 120, co_qualname 128, co_linetable 136, _co_firsttraceable
// 168, co_code_adaptive 184.
func layout311() *Layout {
	l := &Layout{
		RuntimeInterpretersHead: 40, RuntimeTstateCurrent: 576, RuntimeGIL: 360,
		InterpNext: 0, InterpThreadsHead: 16, InterpID: 48, InterpGIL: -1,
		ThreadNext: 8, ThreadInterp: 16, ThreadFrame: 56, CFrameCurrentFrame: 8,
		ThreadID: 152, ThreadNativeID: 160,
		FrameBack: 48, FrameCode: 32, FrameLasti: -1, FrameInstr: 56,
		FrameIsEntry: 68, FrameOwner: 69, FrameSize: 72, OwnedByCStack: -1,
		CodeName: 120, CodeQualname: 128, CodeFilename: 112, CodeFirstLine: 72,
		CodeLineTable: 136, CodeFirstTraceable: 168, CodeAdaptive: 184, CodeSize: 192,
		LineTable: LineTableLocations,
	}
	setGIL(l)
	setUnicode311(l)
	return l
}

// layout312: _PyRuntimeState keeps interpreters.head at 40 and has no GIL
// nor tstate_current (the current thread state is the thread-local
// _Py_tss_tstate; the GIL is each interpreter's). struct _is: next, id
// (8), …, threads.head (72), ceval.gil (384, a pointer). struct _ts:
// cframe at 56 (_PyCFrame: current_frame at 0, previous), thread_id 136,
// native_thread_id 144. _PyInterpreterFrame: f_code (0), previous (8),
// f_funcobj, f_globals, f_builtins, f_locals, frame_obj, prev_instr (56),
// stacktop, return_offset, owner (70); shim frames are owned by the C
// stack (3). PyCodeObject: co_firstlineno 68, _co_firsttraceable 176,
// co_code_adaptive 192.
func layout312() *Layout {
	l := layout311()
	l.RuntimeTstateCurrent, l.RuntimeGIL = -1, -1
	l.InterpThreadsHead, l.InterpID, l.InterpGIL = 72, 8, 384
	l.CFrameCurrentFrame, l.ThreadID, l.ThreadNativeID = 0, 136, 144
	l.FrameBack, l.FrameCode, l.FrameIsEntry, l.FrameOwner, l.OwnedByCStack = 8, 0, -1, 70, 3
	l.CodeFirstLine, l.CodeFirstTraceable, l.CodeAdaptive, l.CodeSize = 68, 176, 192, 200
	setUnicode312(l)
	return l
}

// layout313: _PyRuntimeState opens with _Py_DebugOffsets (which
// debugOffsets reads in place of this table when the cookie is there):
// interpreters.head at 632. struct _is: ceval.gil (16) near the start,
// next (7264), id (7272), threads.head (7344). struct _ts: current_frame
// at 72 (the _PyCFrame is gone), thread_id 152, native_thread_id 160.
// _PyInterpreterFrame: f_executable (0, a code object or None), previous
// (8), instr_ptr (56, the instruction executing), owner (70).
// PyCodeObject: _co_firsttraceable 184, co_code_adaptive 200.
func layout313() *Layout {
	l := layout312()
	l.RuntimeInterpretersHead = 632
	l.InterpNext, l.InterpID, l.InterpThreadsHead, l.InterpGIL = 7264, 7272, 7344, 16
	l.ThreadFrame, l.CFrameCurrentFrame, l.ThreadID, l.ThreadNativeID = 72, -1, 152, 160
	l.CodeFirstTraceable, l.CodeAdaptive, l.CodeSize = 184, 200, 208
	return l
}
