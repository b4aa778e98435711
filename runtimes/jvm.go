package runtimes

import "strings"

// JVM is HotSpot (OpenJDK and its builds): Java, Kotlin, Scala, Clojure.
var JVM = &Runtime{
	ID:          "jvm",
	Name:        "JVM",
	Executables: []string{"java", "javaw"},
	Libraries:   []string{"libjvm."},
	JIT: &JIT{
		Writer: "jvm",
		// stallwatch asks the JVM itself (package capture, jvm.go).
		Switch: "nothing need be started: stallwatch asks the JVM for its perf map at each capture (jcmd Compiler.perfmap, through its attach mechanism) and reads its code cache when it cannot answer; capture.json's notes say which it did and why a map did not come; " +
			"code compiled after that is named at the next capture; start java with -XX:+PreserveFramePointer for whole Java stacks in samples",
		Writes: func(raw string) bool {
			_, ok := jvmtiParts(raw)
			return ok || isJVMExternal(raw)
		},
		Display: jvmName,
	},
	Pause: &Pause{
		// The VM Thread arms the safepoint and waits for every Java
		// thread to reach a poll (SafepointSynchronize::begin,
		// synchronize_threads), runs the operation
		// (VM_Operation::evaluate, a GC's VM_G1CollectFull and the
		// like), Java threads park in SafepointSynchronize::block; a
		// thread that asked for the operation (System.gc()) waits in
		// VMThread::execute.
		What:      "safepoint",
		Collector: []string{"SafepointSynchronize::begin", "SafepointSynchronize::synchronize_threads"},
		Operation: []string{"VM_Operation::evaluate", "VMThread::evaluate_operation"},
		Waiter: []string{"SafepointSynchronize::block", "SafepointMechanism::process", "VMThread::execute",
			"VMThread::wait_until_executed", "JavaThread::check_safepoint_and_suspend_for_native_trans"},
		NotReached: "runs without reaching a safepoint poll (a counted loop without polls, or long native code that holds the VM in a state that must not be interrupted)",
		Advice:     "-Xlog:safepoint and -Xlog:gc show each pause and the operation; frequent full GCs (System.gc(), a heap too small for the live data) are the usual cause; -XX:+DisableExplicitGC ignores System.gc()",
	},
}

// jvmName handles both JVM spellings: HotSpot's own perf map
// ("long Hot.fibonacci(long)": the return type goes) and perf's JVMTI
// agent ("LHot;fibonacci(J)J": class signature, method, JNI descriptor).
func jvmName(raw string) (Name, bool) {
	if p, ok := jvmtiParts(raw); ok {
		return Name{Name: p}, true
	}
	if isJVMExternal(raw) {
		open := strings.IndexByte(raw, '(')
		sp := strings.LastIndexByte(raw[:open], ' ')
		return Name{Name: raw[sp+1:]}, true
	}
	return Name{}, false
}

// isJVMExternal reports whether s looks like "<type> <class>.<method>(...)".
func isJVMExternal(s string) bool {
	open := strings.IndexByte(s, '(')
	if open < 0 || !strings.HasSuffix(s, ")") {
		return false
	}
	sp := strings.LastIndexByte(s[:open], ' ')
	return sp > 0 && strings.IndexByte(s[sp+1:open], '.') > 0 && !strings.Contains(s[:sp], "[")
}

// jvmtiParts decodes "Lpkg/Class;method(args)ret" into
// "pkg.Class.method(args)" with Java type names.
func jvmtiParts(s string) (string, bool) {
	if len(s) < 4 || s[0] != 'L' {
		return "", false
	}
	semi := strings.IndexByte(s, ';')
	open := strings.IndexByte(s, '(')
	if semi < 2 || open < semi+2 {
		return "", false
	}
	closeP := strings.IndexByte(s[open:], ')')
	if closeP < 0 {
		return "", false
	}
	closeP += open
	class := strings.ReplaceAll(s[1:semi], "/", ".")
	method := s[semi+1 : open]
	args, ok := jniTypes(s[open+1 : closeP])
	if !ok || strings.ContainsAny(method, " ;/") {
		return "", false
	}
	if _, ok := jniTypes(s[closeP+1:]); !ok {
		return "", false
	}
	return class + "." + method + "(" + strings.Join(args, ", ") + ")", true
}

// jniTypes decodes a sequence of JNI field descriptors ("JLjava/lang/String;[I").
func jniTypes(s string) ([]string, bool) {
	var out []string
	for len(s) > 0 {
		dims := 0
		for len(s) > 0 && s[0] == '[' {
			dims++
			s = s[1:]
		}
		if s == "" {
			return nil, false
		}
		var t string
		switch s[0] {
		case 'Z':
			t = "boolean"
		case 'B':
			t = "byte"
		case 'C':
			t = "char"
		case 'S':
			t = "short"
		case 'I':
			t = "int"
		case 'J':
			t = "long"
		case 'F':
			t = "float"
		case 'D':
			t = "double"
		case 'V':
			t = "void"
		case 'L':
			end := strings.IndexByte(s, ';')
			if end < 2 {
				return nil, false
			}
			t = strings.ReplaceAll(s[1:end], "/", ".")
			s = s[end:]
		default:
			return nil, false
		}
		s = s[1:]
		out = append(out, t+strings.Repeat("[]", dims))
	}
	return out, true
}
