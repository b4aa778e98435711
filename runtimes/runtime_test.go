package runtimes

import "testing"

func TestOfExecutable(t *testing.T) {
	for file, want := range map[string]*Runtime{
		"/usr/lib/jvm/java-17/bin/java": JVM, "javaw": JVM,
		"/usr/bin/python3.11": Python, "/usr/bin/python3": Python, "python": Python, "python3.13t": Python, "python3.7m": Python,
		"/usr/bin/node": Node, "/usr/bin/nodejs": Node, "/usr/bin/node (deleted)": Node,
		"/usr/bin/dotnet": DotNet, "/opt/julia-1.11/bin/julia": Julia, "/usr/bin/ruby3.1": Ruby, "ruby": Ruby,
		"/usr/lib/erlang/erts-14/bin/beam.smp": Erlang, "/usr/sbin/php-fpm8.2": PHP, "php": PHP,
		"deno": Deno, "bun": Bun, "wasmtime": Wasmtime,
		"/srv/app/server": nil, "python3-config": nil, "python3.11-x86_64-linux-gnu-config": nil, "javac": nil, "nodemon": nil, "": nil,
	} {
		if got := OfExecutable(file); got != want {
			t.Errorf("OfExecutable(%q) = %v, want %v", file, got, want)
		}
	}
}

func TestOfLibraryAndFrame(t *testing.T) {
	for file, want := range map[string]*Runtime{
		"/usr/lib/jvm/java-17/lib/server/libjvm.so": JVM, "/usr/lib/libnode.so.108": Node,
		"/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0": Python, "/usr/share/dotnet/shared/Microsoft.NETCore.App/8.0.0/libcoreclr.so": DotNet,
		"/opt/julia/lib/libjulia-internal.so.1": Julia, "/usr/lib/libruby.so.3.1": Ruby, "/usr/lib/libc.so.6": nil,
	} {
		if got := OfLibrary(file); got != want {
			t.Errorf("OfLibrary(%q) = %v, want %v", file, got, want)
		}
	}
	if OfFrame("runtime.goexit") != Go || OfFrame("runtime.mstart.abi0") != Go || OfFrame("main.main") != nil {
		t.Error("Go is known by runtime.goexit and runtime.mstart, and by no other function")
	}
}

// TestJITOf: each JIT knows its own names, and no other JIT claims them.
func TestJITOf(t *testing.T) {
	for raw, want := range map[string]*JIT{
		"JS:*fibonacci /app/fib.js:1:1": Node.JIT, "Builtin:ArrayMap": Node.JIT,
		"py::fibonacci:/app/fib.py": Python.JIT, "wasm[0]::function[3]::fib": Wasmtime.JIT,
		"julia_fibonacci_1234": Julia.JIT, "void [App] App.Program::Main(string[])[OptimizedTier1]": DotNet.JIT,
		"LHot;fibonacci(J)J": JVM.JIT, "long Hot.fibonacci(long)": JVM.JIT,
		"_ZN3foo3barEv": nil, "some stub": nil, "": nil,
	} {
		if got := JITOf(raw); got != want {
			t.Errorf("JITOf(%q) = %+v, want %+v", raw, got, want)
		}
	}
	if JITByWriter("v8") != Node.JIT || JITByWriter("llvm") != Julia.JIT || JITByWriter("unknown") != nil {
		t.Error("JITByWriter")
	}
}

// TestDescriptors: every descriptor says what its kind of knowledge
// needs; no two share an ID or an executable.
func TestDescriptors(t *testing.T) {
	ids, exes := map[string]bool{}, map[string]string{}
	for _, r := range All() {
		if r.ID == "" || r.Name == "" || ids[r.ID] {
			t.Errorf("%+v: an ID and a name, each its own", r)
		}
		ids[r.ID] = true
		if len(r.Executables)+len(r.Libraries)+len(r.Frames) == 0 {
			t.Errorf("%s: nothing recognises it", r.ID)
		}
		for _, e := range r.Executables {
			if o, ok := exes[e]; ok {
				t.Errorf("%s is both %s's and %s's", e, o, r.ID)
			}
			exes[e] = r.ID
		}
		if j := r.JIT; j != nil && (j.Writer == "" || j.Switch == "" || j.Writes == nil || j.Display == nil) {
			t.Errorf("%s: a JIT without its writer, switch or syntax", r.ID)
		}
		if p := r.Pause; p != nil && (p.What == "" || len(p.Collector) == 0 || len(p.Operation) == 0 || len(p.Waiter) == 0 || p.NotReached == "" || p.Advice == "") {
			t.Errorf("%s: a pause without its functions or advice", r.ID)
		}
		if ByID(r.ID) != r {
			t.Errorf("ByID(%q)", r.ID)
		}
	}
}

func TestProcessName(t *testing.T) {
	for _, tc := range []struct {
		exe     string
		command []string
		comm    string
		want    string
	}{
		{"/usr/bin/python3.11", []string{"python3", "app.py"}, "python3", "python3.11"},
		{"/opt/app/server (deleted)", []string{"./server"}, "server", "server"},
		{"", []string{"/usr/bin/node", "x.js"}, "node", "node"}, // exe unreadable
		{"", nil, "kworker", "kworker"},
	} {
		if got := ProcessName(tc.exe, tc.command, tc.comm); got != tc.want {
			t.Errorf("ProcessName(%q, %q, %q) = %q, want %q", tc.exe, tc.command, tc.comm, got, tc.want)
		}
	}
}
