package runtimes

import (
	"strconv"
	"strings"
)

// Node is Node.js, and its V8.
var Node = &Runtime{
	ID:          "node",
	Name:        "Node.js",
	Executables: []string{"node", "nodejs"},
	Libraries:   []string{"libnode."},
	JIT: &JIT{
		Writer:  "v8",
		Switch:  "start node with --perf-basic-prof (a /tmp/perf-<pid>.map) or --perf-prof (a jitdump); add --interpreted-frames-native-stack to see interpreted functions",
		Writes:  isV8Name,
		Display: v8Name,
	},
}

// v8Prefixes are the code kinds V8's perf logger writes before the colon
// (log.cc, CodeEventLogger); "LazyCompile", "Function" and "Script" are
// the names of V8 before 11.x.
var v8Prefixes = []string{
	"JS:", "Builtin:", "BytecodeHandler:", "Handler:", "Stub:", "RegExp:",
	"Eval:", "Script:", "LazyCompile:", "Function:", "Callback:",
	"Wasm:",
}

// isV8Name says whether a raw name starts with one of V8's code kinds; it
// looks at the first byte before comparing prefixes.
func isV8Name(raw string) bool {
	if raw == "" {
		return false
	}
	switch raw[0] {
	case 'J', 'B', 'H', 'S', 'R', 'E', 'L', 'F', 'C', 'W':
		for _, p := range v8Prefixes {
			if strings.HasPrefix(raw, p) {
				return true
			}
		}
	}
	return false
}

// v8Tiers are the marks V8 puts before a JS function's name: ~ interpreted
// or unoptimized, ^ Sparkplug, + Maglev, * TurboFan.
const v8Tiers = "~^+*"

// v8Name reads "<Kind>:<tier><name> <script>:<line>:<col>". Kinds that are
// not the user's JavaScript (Builtin, BytecodeHandler, Stub, RegExp ...)
// keep their prefix: "ArrayMap" alone would read like a user function.
func v8Name(raw string) (Name, bool) {
	kind, rest, ok := strings.Cut(raw, ":")
	if !ok {
		return Name{}, false
	}
	switch kind {
	case "JS", "LazyCompile", "Function", "Script", "Eval":
	default:
		return Name{Name: raw}, true
	}
	if rest != "" && strings.IndexByte(v8Tiers, rest[0]) >= 0 {
		rest = rest[1:]
	}
	name, file, line := splitV8Script(rest)
	if name == "" {
		name = "(anonymous)"
	}
	return Name{Name: name, File: file, Line: line}, true
}

// splitV8Script separates "name script:line:col". The function name may
// hold spaces ("get foo") and so may the script's path; the script is
// taken to start at the first space followed by something path-like, or
// else at the last space.
func splitV8Script(s string) (name, file string, line int) {
	cut := -1
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' && pathLike(s[i+1:]) {
			cut = i
			break
		}
	}
	if cut < 0 {
		cut = strings.LastIndexByte(s, ' ')
	}
	if cut < 0 {
		// No script: a name alone, or a script alone (":1:20").
		if f, l, ok := trimLineCol(s); ok && !strings.ContainsAny(f, " ") && (f == "" || pathLike(f)) {
			return "", f, l
		}
		return s, "", 0
	}
	name = s[:cut]
	if f, l, ok := trimLineCol(s[cut+1:]); ok {
		return name, f, l
	}
	return name, s[cut+1:], 0
}

func pathLike(s string) bool {
	if s == "" {
		return false
	}
	switch s[0] {
	case '/', '.', '[', ':', '<':
		return true
	}
	return strings.HasPrefix(s, "node:") || strings.HasPrefix(s, "file:") ||
		strings.HasPrefix(s, "http:") || strings.HasPrefix(s, "https:") ||
		strings.HasPrefix(s, "ext:") || strings.HasPrefix(s, "deno:")
}

// trimLineCol removes ":line:col" or ":line" from the end of s.
func trimLineCol(s string) (file string, line int, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 || !allDigits(s[i+1:]) {
		return s, 0, false
	}
	n, _ := strconv.Atoi(s[i+1:])
	if j := strings.LastIndexByte(s[:i], ':'); j >= 0 && allDigits(s[j+1:i]) {
		// ":line:col": the column is dropped.
		n, _ = strconv.Atoi(s[j+1 : i])
		return s[:j], n, true
	}
	return s[:i], n, true
}

func allDigits(s string) bool {
	if s == "" || len(s) > 9 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
