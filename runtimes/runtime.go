package runtimes

import (
	"path"
	"strings"
)

// Runtime is what stallwatch knows of one language runtime.
type Runtime struct {
	// ID names the runtime in capture.json (a finding's runtime) and in
	// Datadog's `runtime` tag: "jvm", "node", "python" …
	ID string
	// Name is how a sentence names it: "JVM", "Node.js", "CPython".
	Name string

	// How it is recognised. Executables are the base names of its
	// programs; a trailing version ("python3.11", "php8.2") is theirs
	// too. Libraries are prefixes of its shared libraries' base names,
	// for a runtime embedded in another program ("libjvm."). Exports
	// are symbols only its code defines, for a runtime linked into a
	// program of another name ("_PyRuntime"). Frames are functions only
	// its threads run, for a runtime linked into the program itself
	// (Go).
	Executables []string
	Libraries   []string
	Exports     []string
	Frames      []string

	// JIT is how its just-in-time compiler names the code it compiles in
	// the jitdump or perf map it writes, and the switch that makes it
	// write them; nil for a runtime without a JIT a profiler reads.
	JIT *JIT

	// Pause is how it stops its threads (a safepoint, a stop-the-world,
	// a suspension); nil when stallwatch knows of none.
	Pause *Pause

	// Reader reads the runtime's own state from outside the process:
	// each thread's frames of its code and what it waits for; nil for a
	// runtime stallwatch has no reader of (see the package doc).
	Reader Reader
}

// String is the runtime's name in a sentence.
func (r *Runtime) String() string {
	if r == nil {
		return "the runtime"
	}
	return r.Name
}

// JIT is how a runtime's JIT names its code, and how to have it do so.
type JIT struct {
	// Writer names the JIT that writes the symbol files, as package jit
	// names it ("v8", "llvm", "jvm", "dotnet", "wasmtime", "cpython"):
	// several runtimes may share one (LLVM).
	Writer string
	// Switch is how to start the runtime so that a profiler outside it
	// names its JIT code, in words that finish "To name it, …".
	Switch string
	// Writes reports whether a raw symbol name is in this JIT's syntax.
	// It looks at prefixes and a few bytes: it runs for every record
	// of a jitdump.
	Writes func(raw string) bool
	// Display turns a raw name into the name people read; ok is false
	// for a name this JIT does not write.
	Display func(raw string) (n Name, ok bool)
}

// Name is what people read for a piece of JIT code: the function, and the
// source file and line when the raw name holds them.
type Name struct {
	Name string
	File string
	Line int
}

// Pause describes how a runtime stops its threads for a collection or
// another operation, by the functions its threads are found in: those of
// the thread that stops the others and waits for them (Collector), those
// of the work done while they are stopped (Operation), and those the
// stopped threads wait in (Waiter). The names are the runtimes' own, as
// their sources define them; a name matches a function that contains it.
type Pause struct {
	What      string // "safepoint", "stop-the-world"
	Collector []string
	Operation []string
	Waiter    []string
	// NotReached explains a thread that runs on while the others wait.
	NotReached string
	// Advice says how to see and shorten the pauses.
	Advice string
}

// all is every descriptor, one file each, in the order their JIT names
// are recognised (JITOf).
var all = []*Runtime{Node, Python, Wasmtime, Julia, DotNet, JVM, Go, Ruby, Erlang, PHP, Deno, Bun}

// All returns every runtime stallwatch knows.
func All() []*Runtime { return append([]*Runtime(nil), all...) }

// ByID returns the runtime of an ID ("jvm"); nil for none.
func ByID(id string) *Runtime {
	for _, r := range all {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// OfExecutable returns the runtime an executable is, from its path or
// base name (" (deleted)", as /proc/<pid>/exe says of a replaced file, is
// ignored); nil when its name does not say.
func OfExecutable(file string) *Runtime {
	b := path.Base(strings.TrimSuffix(file, " (deleted)"))
	for _, r := range all {
		for _, e := range r.Executables {
			if b == e || versioned(b, e) {
				return r
			}
		}
	}
	return nil
}

// versioned says whether name is exe followed by a version: digits and
// dots, and up to two letters of a build's flavour ("python3.11" and
// "python3.13t" of "python", "php-fpm8.2" of "php-fpm").
func versioned(name, exe string) bool {
	v, ok := strings.CutPrefix(name, exe)
	if !ok || v == "" || v[0] < '0' || v[0] > '9' {
		return false
	}
	flavour := strings.TrimRight(v, "abcdefghijklmnopqrstuvwxyz")
	return len(v)-len(flavour) <= 2 && strings.Trim(flavour, "0123456789.") == ""
}

// OfLibrary returns the runtime a shared library belongs to; nil for
// none.
func OfLibrary(file string) *Runtime {
	b := path.Base(file)
	for _, r := range all {
		for _, l := range r.Libraries {
			if strings.HasPrefix(b, l) {
				return r
			}
		}
	}
	return nil
}

// OfFrame returns the runtime whose threads alone run a function; nil
// for none.
func OfFrame(function string) *Runtime {
	for _, r := range all {
		for _, f := range r.Frames {
			if function == f {
				return r
			}
		}
	}
	return nil
}

// JITOf returns the JIT that writes a raw symbol name; nil when the name
// says nothing decisive.
func JITOf(raw string) *JIT {
	if raw == "" {
		return nil
	}
	for _, r := range all {
		if r.JIT != nil && r.JIT.Writes(raw) {
			return r.JIT
		}
	}
	return nil
}

// JITByWriter returns the JIT a writer's name ("v8") names; nil for none.
func JITByWriter(writer string) *JIT {
	for _, r := range all {
		if r.JIT != nil && r.JIT.Writer == writer {
			return r.JIT
		}
	}
	return nil
}

// ProcessName is the value of the process tag, the one name alerts,
// hooks and uploads give a process: its executable's base name
// ("python3.11", as the kernel resolved it, whatever name or link the
// process was started by), else its command's first word's, else comm
// (15 characters at most, and the program may rename it).
func ProcessName(exe string, command []string, comm string) string {
	exe = strings.TrimSuffix(exe, " (deleted)")
	switch {
	case exe != "":
		return path.Base(exe)
	case len(command) > 0 && command[0] != "":
		return path.Base(command[0])
	}
	return comm
}
