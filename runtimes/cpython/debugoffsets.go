package cpython

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// CPython 3.13 begins _PyRuntime with _Py_DebugOffsets
// (Include/internal/pycore_runtime.h): the cookie "xdebugpy",
// PY_VERSION_HEX, whether the build is free-threaded, then, for each
// structure an out-of-process reader needs, its size and the offsets of
// its fields, every one a uint64. debugOffsets reads them in place of the
// version's table where the target has them.

const (
	debugCookie = "xdebugpy"
	// debugHeader is cookie, version and free_threaded.
	debugHeader = 24
	// debugOffsetsSize313 is sizeof(_Py_DebugOffsets) in 3.13: 73 uint64s.
	debugOffsetsSize313 = 584
)

// Positions of the fields read, in uint64s from the start of
// _Py_DebugOffsets (3.13): each group opens with the structure's size.
const (
	doRuntimeInterpretersHead = 3 + 2 // runtime_state: size, finalizing, interpreters_head

	doInterp            = 6 // interpreter_state: size, id, next, threads_head, gc, imports_modules, sysdict, builtins, ceval_gil, gil_runtime_state, _enabled, _locked, _holder
	doInterpID          = doInterp + 1
	doInterpNext        = doInterp + 2
	doInterpThreadsHead = doInterp + 3
	doInterpCevalGIL    = doInterp + 8
	doInterpGILState    = doInterp + 9
	doInterpGILLocked   = doInterp + 11
	doInterpGILHolder   = doInterp + 12

	doThread         = doInterp + 13 // thread_state: size, prev, next, interp, current_frame, thread_id, native_thread_id, datastack_chunk, status
	doThreadNext     = doThread + 2
	doThreadInterp   = doThread + 3
	doThreadFrame    = doThread + 4
	doThreadID       = doThread + 5
	doThreadNativeID = doThread + 6

	doFrame         = doThread + 9 // interpreter_frame: size, previous, executable, instr_ptr, localsplus, owner
	doFramePrevious = doFrame + 1
	doFrameCode     = doFrame + 2
	doFrameInstr    = doFrame + 3
	doFrameOwner    = doFrame + 5

	doCode          = doFrame + 6 // code_object: size, filename, name, qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds, co_code_adaptive
	doCodeFilename  = doCode + 1
	doCodeName      = doCode + 2
	doCodeQualname  = doCode + 3
	doCodeLineTable = doCode + 4
	doCodeFirstLine = doCode + 5
	doCodeAdaptive  = doCode + 9

	doUnicode       = doCode + 10 + 2 + 4 + 3 + 3 + 3 + 2 + 3 + 3 // after pyobject, type, tuple, list, dict, float, long, bytes
	doUnicodeState  = doUnicode + 1
	doUnicodeLength = doUnicode + 2
	doUnicodeASCII  = doUnicode + 3
)

// debugInfo is what the header of _Py_DebugOffsets says.
type debugInfo struct {
	version      Version
	freeThreaded bool
}

// parseDebugHeader reads the header of what may be _Py_DebugOffsets;
// false when the cookie is not there (a version before 3.13).
func parseDebugHeader(b []byte) (debugInfo, bool) {
	if len(b) < debugHeader || !bytes.Equal(b[:8], []byte(debugCookie)) {
		return debugInfo{}, false
	}
	return debugInfo{
		version:      fromHex(binary.LittleEndian.Uint64(b[8:])),
		freeThreaded: binary.LittleEndian.Uint64(b[16:]) != 0,
	}, true
}

// applyDebugOffsets returns table with the offsets _Py_DebugOffsets (b,
// 3.13's layout) gives in place of its own, and the fields where the two
// disagreed. Offsets that cannot be right (past maxStruct) are refused.
func applyDebugOffsets(table *Layout, b []byte) (*Layout, []string, error) {
	if len(b) < debugOffsetsSize313 {
		return nil, nil, fmt.Errorf("_Py_DebugOffsets: %d bytes, want %d", len(b), debugOffsetsSize313)
	}
	word := func(i int) uint64 { return binary.LittleEndian.Uint64(b[i*8:]) }
	l := *table
	var differ []string
	var bad error
	set := func(name string, dst *int64, i int, limit int64) {
		v := word(i)
		if v >= uint64(limit) {
			if bad == nil {
				bad = fmt.Errorf("_Py_DebugOffsets: %s = %d, past the structure (at most %d)", name, v, limit)
			}
			return
		}
		if int64(v) != *dst {
			differ = append(differ, fmt.Sprintf("%s %d (table %d)", name, v, *dst))
		}
		*dst = int64(v)
	}
	// Sizes bound the offsets within each structure.
	runtimeSize := int64(min(word(3), 1<<30))
	interpSize := int64(min(word(doInterp), maxStruct))
	threadSize := int64(min(word(doThread), maxStruct))
	frameSize := int64(min(word(doFrame), maxStruct))
	codeSize := int64(min(word(doCode), maxStruct))
	set("runtime_state.interpreters_head", &l.RuntimeInterpretersHead, doRuntimeInterpretersHead, runtimeSize)
	set("interpreter_state.id", &l.InterpID, doInterpID, interpSize)
	set("interpreter_state.next", &l.InterpNext, doInterpNext, interpSize)
	set("interpreter_state.threads_head", &l.InterpThreadsHead, doInterpThreadsHead, interpSize)
	set("interpreter_state.ceval_gil", &l.InterpGIL, doInterpCevalGIL, interpSize)
	// The GIL's fields are given within the interpreter's own GIL
	// (_gil): relative to it, they are offsets in the GIL structure.
	if gs, lk, hd := word(doInterpGILState), word(doInterpGILLocked), word(doInterpGILHolder); lk > gs && hd > gs && lk-gs < 64 && hd-gs < 64 {
		l.GILLocked, l.GILLastHolder = int64(lk-gs), int64(hd-gs)
		if l.GILLocked != table.GILLocked || l.GILLastHolder != table.GILLastHolder {
			differ = append(differ, fmt.Sprintf("gil locked/holder %d/%d (table %d/%d)", l.GILLocked, l.GILLastHolder, table.GILLocked, table.GILLastHolder))
		}
	}
	set("thread_state.next", &l.ThreadNext, doThreadNext, threadSize)
	set("thread_state.interp", &l.ThreadInterp, doThreadInterp, threadSize)
	set("thread_state.current_frame", &l.ThreadFrame, doThreadFrame, threadSize)
	set("thread_state.thread_id", &l.ThreadID, doThreadID, threadSize)
	set("thread_state.native_thread_id", &l.ThreadNativeID, doThreadNativeID, threadSize)
	set("interpreter_frame.previous", &l.FrameBack, doFramePrevious, frameSize)
	set("interpreter_frame.executable", &l.FrameCode, doFrameCode, frameSize)
	set("interpreter_frame.instr_ptr", &l.FrameInstr, doFrameInstr, frameSize)
	set("interpreter_frame.owner", &l.FrameOwner, doFrameOwner, frameSize)
	set("code_object.filename", &l.CodeFilename, doCodeFilename, codeSize)
	set("code_object.name", &l.CodeName, doCodeName, codeSize)
	set("code_object.qualname", &l.CodeQualname, doCodeQualname, codeSize)
	set("code_object.linetable", &l.CodeLineTable, doCodeLineTable, codeSize)
	set("code_object.firstlineno", &l.CodeFirstLine, doCodeFirstLine, codeSize)
	set("code_object.co_code_adaptive", &l.CodeAdaptive, doCodeAdaptive, codeSize+1)
	set("unicode_object.state", &l.UnicodeState, doUnicodeState, 64)
	set("unicode_object.length", &l.UnicodeLength, doUnicodeLength, 64)
	set("unicode_object.asciiobject_size", &l.UnicodeASCIISize, doUnicodeASCII, 128)
	if bad != nil {
		return nil, nil, bad
	}
	l.FrameSize = max(l.FrameSize, fieldsEnd(l.FrameBack, l.FrameCode, l.FrameInstr), l.FrameOwner+1)
	l.CodeSize = max(l.CodeSize, fieldsEnd(l.CodeName, l.CodeQualname, l.CodeFilename, l.CodeLineTable, l.CodeFirstLine))
	return &l, differ, nil
}
