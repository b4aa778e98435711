package target

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/runtimes"
)

func TestMain(m *testing.M) { testutil.Main(m, testutil.RemoveJavaClasses) }

// TestReaders: a real process's runtime reader is the one its descriptor
// names, found through the descriptor (Debian's python3 by its
// executable, a JVM by the libjvm.so it maps, node by its executable),
// and answers what only its runtime answers (CPython's samples, HotSpot's
// flags and code cache); a process that runs no runtime with a reader
// gets none: a C program, one its name makes a runtime without a reader
// (ruby), and one named python that embeds no interpreter (its reader
// finds it absent).
func TestReaders(t *testing.T) {
	testutil.RequirePtrace(t)
	python := testutil.RequireTool(t, "/usr/bin/python3")
	node := testutil.RequireTool(t, "node")
	py := testutil.Start(t, python, "-c", "import os, sys; sys.stdout.write('ready\\n'); sys.stdout.flush(); os.read(os.pipe()[0], 1)")
	py.WaitLine(t, "ready", 30*time.Second)
	js := testutil.Start(t, node, testutil.Testdata(t, "node", "block.js"))
	js.WaitLine(t, "ready", 30*time.Second)
	java := testutil.StartJava(t, nil, "deadlock")
	sleeper := testutil.Start(t, "/bin/sleep", "600")
	ruby := testutil.Start(t, copyOf(t, "/bin/sleep", "ruby"), "600")
	notPython := testutil.Start(t, copyOf(t, "/bin/sleep", "python3"), "600")

	for _, c := range []struct {
		name string
		pid  int
		want *runtimes.Runtime // nil: none
	}{
		{"python3", py.Pid, runtimes.Python},
		{"node", js.Pid, runtimes.Node},
		{"java", java.Pid, runtimes.JVM},
		{"sleep", sleeper.Pid, nil},
		{"ruby", ruby.Pid, nil},
		{"python3 without an interpreter", notPython.Pid, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Open(c.pid, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			rs := p.Readers()
			if c.want == nil {
				if len(rs) != 0 {
					t.Fatalf("readers %+v, want none", rs)
				}
				if _, err := p.Reader(runtimes.Python); !errors.Is(err, runtimes.ErrAbsent) {
					t.Errorf("Reader(Python) of a sleep: %v, want ErrAbsent", err)
				}
				return
			}
			if len(rs) != 1 || rs[0].Runtime != c.want || rs[0].Err != nil {
				t.Fatalf("readers %+v, want %s's alone", rs, c.want)
			}
			inst, err := p.Reader(c.want)
			if err != nil || inst != rs[0].Instance {
				t.Fatalf("Reader(%s) = %v, %v; want Readers' instance", c.want, inst, err)
			}
			_, sampled := inst.(runtimes.Sampled)
			if sampled != (c.want == runtimes.Python) {
				t.Errorf("%s's instance Sampled = %v", c.want, sampled)
			}
			_, flagger := inst.(runtimes.Flagger)
			_, namer := inst.(runtimes.CodeNamer)
			if flagger != (c.want == runtimes.JVM) || namer != (c.want == runtimes.JVM) {
				t.Errorf("%s's instance Flagger = %v, CodeNamer = %v", c.want, flagger, namer)
			}
			if c.want == runtimes.JVM {
				checkJVM(t, inst)
			}
			if _, err := inst.Begin(); err != nil {
				t.Errorf("Begin: %v", err)
			}
		})
	}
}

// checkJVM reads through the JVM's instance what its reader alone
// answers: a flag, and the code cache's names.
func checkJVM(t *testing.T, inst runtimes.Instance) {
	if compressed, err := inst.(runtimes.Flagger).BoolFlag("UseCompressedOops"); err != nil || !compressed {
		t.Errorf("UseCompressedOops = %v, %v; the JVM's default is true", compressed, err)
	}
	code, err := inst.(runtimes.CodeNamer).CodeNames()
	if len(code) == 0 {
		t.Errorf("no code in the code cache (%v)", err)
	}
}

// copyOf copies an executable under another name.
func copyOf(t *testing.T, path, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	testutil.CopyExecutable(t, path, out)
	return out
}
