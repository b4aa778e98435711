package attach

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/runtimes/hotspot"
)

// The tests attach to real JVMs running testdata/jvm/Stall.java.
func TestMain(m *testing.M) { testutil.Main(m, testutil.RemoveJavaClasses) }

// jvm is a test JVM: the target and where it runs.
type jvm struct {
	*testutil.Target
	cwd string
	pid int // the JVM's, as the host sees it
}

// startJVM runs `java flags… Stall mode` (after shell's commands, run in
// the class directory, when given), waits for its "ready", and removes
// what a killed JVM leaves behind once the test ends.
func startJVM(t testing.TB, sys *syscall.SysProcAttr, shell string, flags []string, mode string) *jvm {
	t.Helper()
	java := testutil.RequireTool(t, "java")
	dir := testutil.JavaClasses(t)
	cwd := t.TempDir()
	var pid int
	t.Cleanup(func() {
		if pid != 0 {
			testutil.RemoveJavaLeftovers(pid)
		}
	})
	argv := append(append([]string{java}, flags...), "-cp", dir, "Stall", mode)
	var cmd *exec.Cmd
	if shell != "" {
		argv[len(flags)+2] = "$CP"
		cmd = exec.Command("/bin/sh", "-c", shell+" "+strings.Join(argv, " "))
		cmd.Dir = dir
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Dir = cwd
	}
	cmd.SysProcAttr = sys
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 60*time.Second)
	// The JVM's pid as the host sees it: the shell's child, when wrapped.
	pid = tg.Pid
	if shell != "" {
		pid = childOf(t, tg.Pid)
	}
	return &jvm{Target: tg, cwd: cwd, pid: pid}
}

// childOf is the only child of pid.
func childOf(t testing.TB, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		t.Fatalf("pid %d has children %q", pid, f)
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// command runs one command in the JVM within timeout.
func command(t testing.TB, c *Client, cmd string, timeout time.Duration) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.Command(ctx, cmd)
}

func newClient(t testing.TB, pid int, opts Options) *Client {
	t.Helper()
	c, err := New(pid, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestThreadPrint: a JVM started with no flag answers Thread.print -l
// through its attach mechanism with the dump jstack prints: the same
// threads, frames and deadlock. The listener is started once, by one
// signal, and the trigger file is gone once it runs.
func TestThreadPrint(t *testing.T) {
	testutil.RequireRoot(t)
	j := startJVM(t, nil, "", nil, "deadlock")
	c := newClient(t, j.pid, Options{})
	out, err := command(t, c, "Thread.print -l", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Signalled() {
		t.Error("the JVM's listener ran before the client asked")
	}
	got := hotspot.ParseThreadDump(out)
	jstackOut, err := exec.Command(testutil.RequireTool(t, "jstack"), "-l", strconv.Itoa(j.pid)).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := hotspot.ParseThreadDump(jstackOut)
	if len(got.Problems) > 0 || len(got.Threads) < 10 {
		t.Fatalf("%d threads read, problems %q", len(got.Threads), got.Problems)
	}
	for _, w := range want.Threads {
		g := got.Thread(w.TID)
		if g == nil || g.Name != w.Name || g.Status != w.Status || len(g.Frames) != len(w.Frames) {
			t.Errorf("jstack's %q (tid %d, %d frames): ours %+v", w.Name, w.TID, len(w.Frames), g)
		}
	}
	if len(got.Deadlocks) != 1 || len(got.Deadlocks[0].Links) != 2 {
		t.Fatalf("deadlocks %+v", got.Deadlocks)
	}
	for i, l := range got.Deadlocks[0].Links {
		w := want.Deadlocks[0].Links[i]
		if l.Name != w.Name || l.TID != w.TID || l.Lock.Object != w.Lock.Object || l.Lock.HolderTID != w.Lock.HolderTID {
			t.Errorf("deadlock link %+v, jstack's %+v", l, w)
		}
	}
	if ents, _ := os.ReadDir(j.cwd); len(ents) != 0 {
		t.Errorf("left in the JVM's directory: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(javaTmp, ".attach_pid"+strconv.Itoa(j.pid))); err == nil {
		t.Error("a trigger file left in /tmp")
	}
}

// TestCompilerPerfmap: the JVM writes its perf map when asked, in its
// /tmp, for the JIT reader to find.
func TestCompilerPerfmap(t *testing.T) {
	testutil.RequireRoot(t)
	j := startJVM(t, nil, "", nil, "deadlock")
	m := filepath.Join(javaTmp, "perf-"+strconv.Itoa(j.pid)+".map")
	t.Cleanup(func() { os.Remove(m) })
	c := newClient(t, j.pid, Options{})
	if _, err := command(t, c, "Compiler.perfmap", time.Minute); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n < 100 || !strings.Contains(string(b), "Interpreter") {
		t.Errorf("perf map of %d lines:\n%.500s", n, b)
	}
	if _, err := command(t, c, "No.such.command", time.Minute); !errors.As(err, new(*CommandError)) {
		t.Errorf("an unknown command: %v, want a *CommandError", err)
	}
}

// TestContainer: a JVM in a container of its own — a user namespace (its
// root is the host's uid 100000), a mount namespace with a /tmp of its
// own, a pid namespace — answers as on the host: the client acts as its
// user, finds its socket in its /tmp, and names it by the pid it sees.
func TestContainer(t *testing.T) {
	testutil.RequireRoot(t)
	const hostUID = 100000
	sys := &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostUID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostUID, Size: 1}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0},
	}
	// The class directory lies under the host's /tmp, which the
	// container's own hides: the classes are copied into it.
	j := startJVM(t, sys, "mount --make-rprivate / && mount -t tmpfs tmpfs /tmp && cp -r . /tmp/classes && cd /tmp && export CP=/tmp/classes &&", nil, "deadlock")
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", j.pid))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(st), fmt.Sprintf("Uid:\t%d\t", hostUID)) || !strings.Contains(string(st), "NSpid:\t"+strconv.Itoa(j.pid)+"\t") {
		t.Fatalf("not a JVM in a container:\n%s", st)
	}
	c := newClient(t, j.pid, Options{})
	out, err := command(t, c, "Thread.print -l", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if d := hotspot.ParseThreadDump(out); len(d.Deadlocks) != 1 {
		t.Errorf("the container's JVM answered %d bytes, %d deadlocks", len(out), len(d.Deadlocks))
	}
	if c.nspid == j.pid {
		t.Errorf("the JVM's own pid %d is the host's", c.nspid)
	}
	if _, err := os.Stat(filepath.Join(javaTmp, ".java_pid"+strconv.Itoa(c.nspid))); err == nil {
		t.Error("the container's socket is in the host's /tmp")
	}
}

// vmFlags reads the JVM's flags from its memory, as a capture does.
func vmFlags(t testing.TB, pid int) func(string) (bool, error) {
	t.Helper()
	mem, syms := liveJVM(t, pid)
	l, err := hotspot.ReadLayout(hotspot.NewReader(mem, hotspot.Limits{}), syms)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := hotspot.NewVM(hotspot.NewReader(mem, hotspot.Limits{}), syms, l)
	if err != nil {
		t.Fatal(err)
	}
	return vm.BoolFlag
}

// TestRefused: a JVM that SIGQUIT would end (-Xrs) or make print a thread
// dump (-XX:+DisableAttachMechanism, however it was given) is never
// signalled, and the refusal says why; it still runs.
func TestRefused(t *testing.T) {
	testutil.RequireRoot(t)
	flagsFile := filepath.Join(testutil.SharedTempDir(t), "flags")
	if err := os.WriteFile(flagsFile, []byte("+DisableAttachMechanism\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		flags   []string
		env     []string
		memory  bool // read the VM's flags from its memory
		because string
	}{
		// -Xrs starts the listener with the JVM: without its socket
		// (removed by a /tmp cleaner), only SIGQUIT would start it,
		// and it would end this JVM.
		{"Xrs, its socket gone", []string{"-Xrs"}, nil, false, "no SIGQUIT handler"},
		{"Xrs, its socket gone, flags from memory", []string{"-Xrs"}, nil, true, "no SIGQUIT handler"},
		{"DisableAttachMechanism", []string{"-XX:+DisableAttachMechanism"}, nil, false, "DisableAttachMechanism"},
		{"DisableAttachMechanism in JAVA_TOOL_OPTIONS", nil, []string{"JAVA_TOOL_OPTIONS=-XX:+DisableAttachMechanism"}, false, "DisableAttachMechanism"},
		{"a flags file, flags from memory", []string{"-XX:Flags=" + flagsFile}, nil, true, "attach mechanism is disabled"},
		{"a flags file, flags unknown", []string{"-XX:Flags=" + flagsFile}, nil, false, "cannot be ruled out"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, kv := range c.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			j := startJVM(t, nil, "", c.flags, "deadlock")
			os.Remove(filepath.Join(javaTmp, ".java_pid"+strconv.Itoa(j.pid)))
			var opts Options
			if c.memory {
				opts.Flags = vmFlags(t, j.pid)
			}
			cl := newClient(t, j.pid, opts)
			_, err := command(t, cl, "Thread.print -l", 10*time.Second)
			var re *RefusedError
			if !errors.As(err, &re) || !strings.Contains(re.Reason, c.because) {
				t.Fatalf("%v, want a refusal because %s", err, c.because)
			}
			if cl.Signalled() {
				t.Error("signalled")
			}
			if _, err := os.Stat(filepath.Join(j.cwd, ".attach_pid"+strconv.Itoa(j.pid))); err == nil {
				t.Error("a trigger file made")
			}
			if err := syscall.Kill(j.pid, 0); err != nil {
				t.Errorf("the JVM: %v", err)
			}
		})
	}
}

// TestNoAnswer: a JVM held at a safepoint cannot start its attach
// listener; the command ends with the caller's deadline, ErrNoAnswer,
// and Close removes the trigger file.
func TestNoAnswer(t *testing.T) {
	testutil.RequireRoot(t)
	j := startJVM(t, nil, "", []string{"-XX:-UseCountedLoopSafepoints"}, "safepoint")
	// Held once the memory says so.
	flags := vmFlags(t, j.pid)
	mem, syms := liveJVM(t, j.pid)
	if err := testutil.Eventually(30*time.Second, func() bool {
		l, err := hotspot.ReadLayout(hotspot.NewReader(mem, hotspot.Limits{}), syms)
		if err != nil {
			return false
		}
		vm, err := hotspot.NewVM(hotspot.NewReader(mem, hotspot.Limits{}), syms, l)
		if err != nil {
			return false
		}
		sp, err := vm.Safepoint()
		return err == nil && sp.State == hotspot.Synchronizing
	}); err != nil {
		t.Fatal("the safepoint never held")
	}
	c, err := New(j.pid, Options{Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = command(t, c, "Thread.print -l", time.Second)
	took := time.Since(start)
	if !errors.Is(err, ErrNoAnswer) {
		t.Fatalf("%v, want ErrNoAnswer", err)
	}
	if took > 3*time.Second {
		t.Errorf("gave up after %v, the deadline was 1s", took)
	}
	trigger := filepath.Join(j.cwd, ".attach_pid"+strconv.Itoa(j.pid))
	if _, err := os.Stat(trigger); err != nil {
		t.Errorf("the trigger, while the JVM may still answer: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(trigger); err == nil {
		t.Error("the trigger left after Close")
	}
}

// TestReduceSignalUsage: a JVM started with -Xrs runs its attach listener
// from the start; the client uses it and sends no signal.
func TestReduceSignalUsage(t *testing.T) {
	testutil.RequireRoot(t)
	j := startJVM(t, nil, "", []string{"-Xrs"}, "deadlock")
	c := newClient(t, j.pid, Options{})
	out, err := command(t, c, "Thread.print -l", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if c.Signalled() || len(hotspot.ParseThreadDump(out).Deadlocks) != 1 {
		t.Errorf("signalled %v; the dump:\n%.300s", c.Signalled(), out)
	}
}

// javaTmp is where the JVM keeps its attach files and perf map: its
// java.io.tmpdir, /tmp whatever $TMPDIR says.
const javaTmp = "/tmp"
