package runtimes

import (
	"errors"
	"strconv"
	"strings"

	"github.com/stallwatch/stallwatch/model"
	v8 "github.com/stallwatch/stallwatch/runtimes/v8"
)

// Node is Node.js, and its V8. Its reader (package runtimes/v8) reads
// the JavaScript frames of a stopped thread from its memory, through the
// layout its binary publishes for debuggers.
var Node = &Runtime{
	ID:          "node",
	Name:        "Node.js",
	Executables: []string{"node", "nodejs"},
	Libraries:   []string{"libnode."},
	// V8's postmortem table, in a program of another name.
	Exports: []string{"v8dbg_type_JSFunction__JS_FUNCTION_TYPE"},
	Reader:  v8Reader{},
	JIT: &JIT{
		Writer:  "v8",
		Switch:  "start node with --perf-basic-prof (a /tmp/perf-<pid>.map) or --perf-prof (a jitdump); add --interpreted-frames-native-stack to see interpreted functions",
		Writes:  isV8Name,
		Display: v8Name,
	},
}

// v8Reader opens V8's reader (package runtimes/v8) over the binary that
// holds V8: the executable, or a library named for it (libnode).
type v8Reader struct{}

func (v8Reader) NotRead() string { return "JavaScript frames not read" }

// Open reads the layout V8's binary publishes (before any stop: its
// symbols are loaded then): an error wrapping v8.ErrNotV8 for a process
// that runs none, a *v8.LayoutError for a build the reader cannot read.
func (v8Reader) Open(p *Process) (Instance, error) {
	var layoutErr error
	for _, img := range p.Images {
		if img.Object == nil || !img.Executable && OfLibrary(img.Path) != Node {
			continue
		}
		l, err := v8.LoadLayout(img.Object)
		if err != nil {
			var le *v8.LayoutError
			if errors.As(err, &le) && len(le.Missing) > 0 && le.Version == (v8.Version{}) {
				continue // no V8 in this binary at all
			}
			layoutErr = err
			continue
		}
		fns, local, err := img.Object.Functions()
		if err != nil {
			return nil, err
		}
		return &v8Instance{layout: l, mem: p.Memory, maps: p.Mappings, path: img.Path, fns: fns, named: local}, nil
	}
	if layoutErr != nil {
		return nil, layoutErr
	}
	return nil, absent{v8.ErrNotV8}
}

// v8Instance is a target's V8: the layout its binary publishes, and what
// tells V8's code from the rest at an address.
type v8Instance struct {
	layout *v8.Layout
	mem    Memory
	maps   Mappings
	path   string    // the binary that holds V8
	fns    Functions // its functions; builtins are told by name
	// named: fns has the static symbol table, where V8's builtins are
	// named (Builtins_*); without it, a pc in the binary is V8's C++ or
	// a builtin, which only the frame's own contents can tell.
	named bool
}

// codeAt says what code pc (a return address when ret) is in, as far as
// the target's mappings and V8's binary tell: false when it is no code of
// V8's (another library, V8's own C++).
func (v *v8Instance) codeAt(pc uint64, ret bool) (v8.Code, bool) {
	path, anon, ok := v.maps.At(pc)
	switch {
	case !ok:
		return 0, false
	case anon:
		return v8.CodeJIT, true
	case path != v.path:
		return 0, false
	case !v.named:
		return v8.CodeUnknown, true
	}
	look := pc
	if ret {
		look--
	}
	// A return address just past a builtin's last call may be the first
	// byte of the next symbol: look up the call's own byte.
	name, ok := v.fns.FunctionAt(look)
	if ok && strings.HasPrefix(name, "Builtins_") {
		return v8.CodeBuiltins, true
	}
	return 0, false
}

// Begin starts a snapshot's reading of JavaScript frames. It reads a
// stack while its thread is stopped (or blocked in the kernel): V8 moves
// objects only in a collection, which the stopped thread's isolate
// cannot be in.
func (v *v8Instance) Begin() (Reading, error) {
	return &v8Reading{v: v, r: v8.NewReader(v.layout, v.mem), frames: map[int][]jsFrame{}}, nil
}

// v8Reading is one snapshot's: the JavaScript frames of each thread's
// native frames, by their index in its native stack.
type v8Reading struct {
	v      *v8Instance
	r      *v8.Reader
	frames map[int][]jsFrame
	cut    []jsCut
}

// jsFrame is the JavaScript of one native frame of a stack.
type jsFrame struct {
	index int    // in the native stack
	pc    uint64 // its pc, to check the stack is the one read
	frame v8.Frame
}

// jsCut says a thread's last frames were not read.
type jsCut struct{ tid, frames int }

// maxJSReads bounds the reads of the target's memory one stack's
// JavaScript frames may take, which lengthen its thread's stop: a frame
// costs a few pages of the heap (a 17-frame stack of Node.js's module
// loader, 42 reads), a deep recursion of one function hardly more.
const maxJSReads = 1024

// Stop reads the JavaScript frames of a stopped (or blocked) thread's
// native stack. Frames past maxJSReads stay native; a note says how many.
func (r *v8Reading) Stop(tid int, st Stop) {
	if len(st.PCs) == 0 {
		return
	}
	r.r.Forget() // the target ran since the last stack
	var out []jsFrame
	for i, pc := range st.PCs {
		if r.r.Reads() > maxJSReads {
			r.cut = append(r.cut, jsCut{tid: tid, frames: len(st.PCs) - i})
			break
		}
		if i >= len(st.FPs) || st.FPs[i] == 0 {
			continue
		}
		ret := i < len(st.Exact) && !st.Exact[i]
		code, ok := r.v.codeAt(pc, ret)
		if !ok {
			continue
		}
		fr, err := r.r.Frame(v8.At{FP: st.FPs[i], PC: pc, Return: ret, Code: code})
		if err != nil || fr.Kind == v8.Typed {
			continue
		}
		out = append(out, jsFrame{index: i, pc: pc, frame: fr})
	}
	r.frames[tid] = out
}

// Apply names the native frames that run JavaScript by the functions
// they run: an anonymous JIT address ("[anon] 0x…") or the interpreter's
// trampoline becomes the function, script and line.
func (r *v8Reading) Apply(snap *model.Snapshot, note func(string, ...any)) {
	for _, c := range r.cut {
		note("thread %d: its last %d frames were not read for JavaScript: reading them would have taken more than %d reads of its memory while it was stopped", c.tid, c.frames, maxJSReads)
	}
	for i := range snap.Threads {
		t := &snap.Threads[i]
		for _, f := range r.frames[t.TID] {
			if f.index < len(t.User) && f.index < len(t.UserAddrs) && t.UserAddrs[f.index] == f.pc {
				t.User[f.index] = jsLocation(t.User[f.index], f.frame)
			}
		}
	}
}

// jsLocation is the location of a native frame that runs JavaScript: the
// same address and mapping, named by the functions it runs, innermost
// first (several where optimized code inlined them).
func jsLocation(native *model.Location, fr v8.Frame) *model.Location {
	loc := &model.Location{Addr: native.Addr, Mapping: native.Mapping, Kind: native.Kind}
	system := native.Name()
	for _, f := range fr.Functions {
		name := f.Name
		if name == "" {
			name = "(anonymous)"
		}
		loc.Lines = append(loc.Lines, model.Line{Function: name, SystemName: system, File: f.Script, Line: int64(f.Line)})
	}
	return loc
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
