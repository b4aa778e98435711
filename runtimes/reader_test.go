package runtimes

import "testing"

// exporting is an object file that defines some symbols.
type exporting map[string]bool

func (e exporting) Lookup(names []string) (Symbols, error) { return e, nil }
func (e exporting) Symbol(name string) (uint64, uint64, bool) {
	return 0x1000, 8, e[name]
}
func (exporting) Sections() []Section                       { return nil }
func (exporting) DataInts(string) (map[string]int64, error) { return nil, nil }
func (exporting) DataBytes(string) ([]byte, error)          { return nil, nil }
func (exporting) Functions() (Functions, bool, error)       { return nil, false, nil }

// TestRecognises: a descriptor recognises a process by its executable's
// name, by a library it maps (not by an executable named like one), and
// by a symbol its executable (not a library) exports; nothing else.
func TestRecognises(t *testing.T) {
	exe := func(path string, syms ...string) Image {
		e := exporting{}
		for _, s := range syms {
			e[s] = true
		}
		return Image{Path: path, Executable: true, Object: e}
	}
	lib := func(path string, syms ...string) Image {
		img := exe(path, syms...)
		img.Executable = false
		return img
	}
	libc := lib("/usr/lib/x86_64-linux-gnu/libc.so.6")
	for _, c := range []struct {
		name   string
		images []Image
		rt     *Runtime
		want   bool
	}{
		{"python3.11", []Image{exe("/usr/bin/python3.11"), libc}, Python, true},
		{"libpython in uwsgi", []Image{exe("/usr/bin/uwsgi"), lib("/usr/lib/libpython3.11.so.1.0"), libc}, Python, true},
		{"static CPython in uwsgi", []Image{exe("/usr/bin/uwsgi", "_PyRuntime"), libc}, Python, true},
		{"_PyRuntime in a library only", []Image{exe("/usr/bin/app"), lib("/opt/libfoo.so", "_PyRuntime")}, Python, false},
		{"java", []Image{exe("/usr/lib/jvm/java-17/bin/java"), lib("/usr/lib/jvm/java-17/lib/server/libjvm.so")}, JVM, true},
		{"libjvm in a launcher", []Image{exe("/opt/app/launcher"), lib("/usr/lib/jvm/java-17/lib/server/libjvm.so")}, JVM, true},
		{"an executable named like a library", []Image{exe("/tmp/libjvm.so")}, JVM, false},
		{"node", []Image{exe("/usr/bin/node")}, Node, true},
		{"V8's table in another program", []Image{exe("/opt/app/server", "v8dbg_type_JSFunction__JS_FUNCTION_TYPE")}, Node, true},
		{"a C program", []Image{exe("/bin/sleep"), libc}, Python, false},
		{"a C program, as the JVM", []Image{exe("/bin/sleep"), libc}, JVM, false},
		{"an unopened executable", []Image{{Path: "/srv/app", Executable: true}}, Python, false},
	} {
		if got := c.rt.Recognises(&Process{Images: c.images}); got != c.want {
			t.Errorf("%s: %s.Recognises = %v, want %v", c.name, c.rt, got, c.want)
		}
	}
}

// TestReaders: the runtimes whose state stallwatch reads from the outside
// have a reader on their descriptors, and no other does.
func TestReaders(t *testing.T) {
	for _, r := range All() {
		want := r == Python || r == JVM || r == Node
		if (r.Reader != nil) != want {
			t.Errorf("%s has a reader: %v, want %v", r, r.Reader != nil, want)
		}
		if r.Reader != nil && r.Reader.NotRead() == "" {
			t.Errorf("%s's reader says nothing of what it did not read", r)
		}
	}
	if _, ok := Python.Reader.(SampleReader); !ok {
		t.Error("CPython's reader reads no samples")
	}
}
