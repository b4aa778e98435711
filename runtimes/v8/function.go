package v8

import "fmt"

// function is what a SharedFunctionInfo says of its function.
type function struct {
	name   string
	script *script // nil when it has none (a builtin, a function of the debugger's)
}

// maxScanSlots bounds the ScopeInfo slots looked through for the name.
const maxScanSlots = 8

// inlinedLocalNames is V8's kScopeInfoMaxInlinedLocalNamesSize (since
// 10.0, src/common/globals.h): a scope with fewer context locals keeps
// their names in its ScopeInfo, one with more in a hash table (one slot).
const inlinedLocalNames = 75

// sfi reads the function a SharedFunctionInfo describes. Its name is
// V8's SharedFunctionInfo::DebugName: the function's own name, else the
// name V8 inferred from where it was defined ("Module._compile" for a
// function assigned to Module.prototype._compile); "" for an anonymous
// function.
func (r *Reader) sfi(v uint64) (*function, error) {
	obj, err := r.h.typed("SharedFunctionInfo", v, r.l.typeSFI, r.l.typeSFI)
	if err != nil {
		return nil, err
	}
	nameOrScope, err := r.h.field("SharedFunctionInfo", obj, r.l.offSFIName)
	if err != nil {
		return nil, err
	}
	scriptField, err := r.h.field("SharedFunctionInfo", obj, r.l.offSFIScript)
	if err != nil {
		return nil, err
	}
	key := sfiKey{obj: obj, name: nameOrScope, script: scriptField}
	if f, ok := r.functions[key]; ok {
		return f, nil
	}
	f := &function{}
	if f.name, err = r.functionName(nameOrScope); err != nil {
		return nil, err
	}
	f.script = r.scriptOf(scriptField)
	if len(r.functions) >= maxCachedFunctions {
		clear(r.functions)
	}
	r.functions[key] = f
	return f, nil
}

// sfiKey identifies a SharedFunctionInfo as it stands: an address alone
// may have been another function's before a collection moved things.
type sfiKey struct{ obj, name, script uint64 }

// maxCachedFunctions bounds the functions a Reader remembers.
const maxCachedFunctions = 1 << 14

// functionName reads name_or_scope_info: the name itself (a String), no
// name (Smi 0, kNoSharedNameSentinel), or, once the function is
// compiled, its ScopeInfo, which holds it.
func (r *Reader) functionName(v uint64) (string, error) {
	if r.l.isSmi(v) {
		return "", nil
	}
	obj, t, err := r.h.typeOf("function name", v)
	if err != nil {
		return "", err
	}
	switch {
	case t < r.l.firstNonString:
		return r.h.str(v, maxNameBytes)
	case t == r.l.typeScopeInfo:
		return r.scopeInfoName(obj)
	}
	return "", &TypeError{What: "function name or ScopeInfo", Addr: v, Type: t}
}

// scopeInfoName finds the function's name in its ScopeInfo. The slots
// after the fixed ones (flags, parameter count, context local count) are
// the context locals' names and infos, then optional parts the flags
// announce, whose bit positions change from release to release and are
// not published: the saved class variable (a Smi), the function variable
// (its name, or Smi 0 when the function has no shared name, then its
// slot index) and the inferred name. So the first string after the
// locals is the function's own name, and when it is empty the next is
// the inferred one: DebugName. Its position slots and the outer scope's
// ScopeInfo follow, where the scan ends: a ScopeInfo's parts are not all
// present, and past its last the words are another object's.
func (r *Reader) scopeInfoName(obj uint64) (string, error) {
	slot := func(i int64) (uint64, error) {
		return r.h.word("ScopeInfo", obj+uint64(r.l.offScopeInfoSlots+8*i))
	}
	n, err := slot(r.l.scopeNContextLocals)
	if err != nil {
		return "", err
	}
	if !r.l.isSmi(n) || r.l.smi(n) < 0 || r.l.smi(n) > 1<<16 {
		return "", &ReadError{What: "ScopeInfo", Addr: obj, Err: fmt.Errorf("context local count %#x", n)}
	}
	locals := r.l.smi(n)
	first := r.l.scopeFirstVars + 2*locals
	if locals >= inlinedLocalNames {
		first = r.l.scopeFirstVars + 1 + locals
	}
	for i, strings := first, 0; i < first+maxScanSlots && strings < 2; i++ {
		v, err := slot(i)
		if err != nil {
			break // past the last page of the object
		}
		if _, ok := r.l.object(v); !ok {
			continue
		}
		_, t, err := r.h.typeOf("ScopeInfo slot", v)
		if err != nil || t == r.l.typeScopeInfo {
			// The outer scope's ScopeInfo follows the name and the
			// positions: past it lie other parts, or the next object.
			break
		}
		if t >= r.l.firstNonString {
			continue
		}
		// The function's name, or its inferred name when it has none
		// (Smi 0) or an empty one.
		strings++
		name, err := r.h.str(v, maxNameBytes)
		if err != nil || name != "" {
			return name, err
		}
	}
	return "", nil
}
