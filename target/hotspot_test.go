package target

import (
	"errors"
	"os"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/runtimes/hotspot"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveJavaClasses()
	os.Exit(code)
}

// TestJVM: a JVM's layout is found through the libjvm.so it maps, and a
// reading of its memory finds its Java deadlock; a process without one
// says it is no HotSpot.
func TestJVM(t *testing.T) {
	testutil.RequirePtrace(t)
	tg := testutil.StartJava(t, nil, "deadlock")
	p, err := Open(tg.Pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	j, err := p.JVM()
	if err != nil {
		t.Fatal(err)
	}
	if compressed, err := j.Flag("UseCompressedOops"); err != nil || !compressed {
		t.Errorf("UseCompressedOops = %v, %v; the JVM's default is true", compressed, err)
	}
	vm, err := j.VM()
	if err != nil {
		t.Fatal(err)
	}
	java, err := vm.ReadJava(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(java.Deadlocks) != 1 {
		t.Errorf("deadlocks %+v", java.Deadlocks)
	}

	sleeper := testutil.Start(t, "/bin/sleep", "600")
	q, err := Open(sleeper.Pid, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.JVM(); !errors.Is(err, hotspot.ErrNotHotSpot) {
		t.Errorf("a sleep is %v, want ErrNotHotSpot", err)
	}
}
