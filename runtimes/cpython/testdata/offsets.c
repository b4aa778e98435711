/* offsets.c prints, for the CPython whose headers it is compiled against,
 * the offsets of every field stallwatch's runtimes/cpython reads, one
 * "name value" line each. TestLayoutsMatchHeaders compares them with the
 * package's tables. */
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#if PY_VERSION_HEX >= 0x030B0000
#include "internal/pycore_frame.h"
#endif
#if PY_VERSION_HEX >= 0x03090000
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#else
#include "internal/pycore_pystate.h"
#endif
#include "internal/pycore_gil.h"
#if PY_VERSION_HEX < 0x030B0000
#include "frameobject.h"
#endif

#define P(name, v) printf("%s %lld\n", name, (long long)(v))
#define OFF(name, T, f) P(name, offsetof(T, f))

/* state bit positions, learnt by setting one bit field in a zeroed copy */
static int bit_of(PyASCIIObject *o) {
	unsigned int w;
	memcpy(&w, &o->state, sizeof w);
	return w ? __builtin_ctz(w) : -1;
}

int main(void) {
	P("version", PY_VERSION_HEX >> 16);
	OFF("runtime.interpreters_head", _PyRuntimeState, interpreters.head);
	OFF("runtime.interpreters_main", _PyRuntimeState, interpreters.main);
#if PY_VERSION_HEX < 0x030C0000
	OFF("runtime.tstate_current", _PyRuntimeState, gilstate.tstate_current);
	OFF("runtime.gil", _PyRuntimeState, ceval.gil);
#endif
	P("runtime.size", sizeof(_PyRuntimeState));
#if PY_VERSION_HEX >= 0x030D0000
	OFF("runtime.debug_offsets", _PyRuntimeState, debug_offsets);
#endif

	OFF("interp.next", PyInterpreterState, next);
#if PY_VERSION_HEX >= 0x030B0000
	OFF("interp.threads_head", PyInterpreterState, threads.head);
#else
	OFF("interp.threads_head", PyInterpreterState, tstate_head);
#endif
	OFF("interp.id", PyInterpreterState, id);
#if PY_VERSION_HEX >= 0x030C0000
	OFF("interp.gil", PyInterpreterState, ceval.gil);
#endif

	OFF("thread.next", PyThreadState, next);
	OFF("thread.interp", PyThreadState, interp);
#if PY_VERSION_HEX >= 0x030D0000
	OFF("thread.frame", PyThreadState, current_frame);
#elif PY_VERSION_HEX >= 0x030B0000
	OFF("thread.frame", PyThreadState, cframe);
	OFF("cframe.current_frame", _PyCFrame, current_frame);
#else
	OFF("thread.frame", PyThreadState, frame);
#endif
	OFF("thread.thread_id", PyThreadState, thread_id);
#if PY_VERSION_HEX >= 0x030B0000
	OFF("thread.native_thread_id", PyThreadState, native_thread_id);
#endif
	P("thread.size", sizeof(PyThreadState));

	OFF("gil.last_holder", struct _gil_runtime_state, last_holder);
	OFF("gil.locked", struct _gil_runtime_state, locked);
	OFF("gil.switch_number", struct _gil_runtime_state, switch_number);
	OFF("gil.cond", struct _gil_runtime_state, cond);
	OFF("gil.mutex", struct _gil_runtime_state, mutex);
	P("gil.cond_size", sizeof(((struct _gil_runtime_state *)0)->cond));
	P("gil.mutex_size", sizeof(((struct _gil_runtime_state *)0)->mutex));

#if PY_VERSION_HEX >= 0x030B0000
	OFF("frame.back", _PyInterpreterFrame, previous);
#if PY_VERSION_HEX >= 0x030D0000
	OFF("frame.code", _PyInterpreterFrame, f_executable);
	OFF("frame.instr", _PyInterpreterFrame, instr_ptr);
#else
	OFF("frame.code", _PyInterpreterFrame, f_code);
	OFF("frame.instr", _PyInterpreterFrame, prev_instr);
#endif
#if PY_VERSION_HEX < 0x030C0000
	OFF("frame.is_entry", _PyInterpreterFrame, is_entry);
#endif
	OFF("frame.owner", _PyInterpreterFrame, owner);
	OFF("frame.localsplus", _PyInterpreterFrame, localsplus);
	P("frame.owned_by_cstack",
#if PY_VERSION_HEX >= 0x030C0000
	  FRAME_OWNED_BY_CSTACK
#else
	  -1
#endif
	);
#else
	OFF("frame.back", PyFrameObject, f_back);
	OFF("frame.code", PyFrameObject, f_code);
	OFF("frame.lasti", PyFrameObject, f_lasti);
	OFF("frame.localsplus", PyFrameObject, f_localsplus);
#endif

	OFF("code.name", PyCodeObject, co_name);
	OFF("code.filename", PyCodeObject, co_filename);
	OFF("code.firstlineno", PyCodeObject, co_firstlineno);
#if PY_VERSION_HEX >= 0x030B0000
	OFF("code.qualname", PyCodeObject, co_qualname);
	OFF("code.code_adaptive", PyCodeObject, co_code_adaptive);
	OFF("code.firsttraceable", PyCodeObject, _co_firsttraceable);
#endif
#if PY_VERSION_HEX >= 0x030A0000
	OFF("code.linetable", PyCodeObject, co_linetable);
#else
	OFF("code.linetable", PyCodeObject, co_lnotab);
#endif
	P("code.size", sizeof(PyCodeObject));

	OFF("object.type", PyObject, ob_type);
	OFF("varobject.size", PyVarObject, ob_size);
	OFF("bytes.data", PyBytesObject, ob_sval);
	OFF("unicode.length", PyASCIIObject, length);
	OFF("unicode.state", PyASCIIObject, state);
	P("unicode.ascii_size", sizeof(PyASCIIObject));
	P("unicode.compact_size", sizeof(PyCompactUnicodeObject));
	OFF("unicode.data", PyUnicodeObject, data);
	{
		PyASCIIObject o;
		memset(&o, 0, sizeof o); o.state.kind = 1; P("unicode.kind_shift", bit_of(&o));
		memset(&o, 0, sizeof o); o.state.compact = 1; P("unicode.compact_bit", bit_of(&o));
		memset(&o, 0, sizeof o); o.state.ascii = 1; P("unicode.ascii_bit", bit_of(&o));
#if PY_VERSION_HEX < 0x030C0000
		memset(&o, 0, sizeof o); o.state.ready = 1; P("unicode.ready_bit", bit_of(&o));
#endif
	}
	return 0;
}
