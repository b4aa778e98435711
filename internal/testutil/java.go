package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// javaClasses is testdata/jvm compiled, once per test binary.
var javaClasses struct {
	once sync.Once
	dir  string
	err  error
}

// JavaClasses compiles testdata/jvm/*.java with javac, once per test
// binary, into a directory every user may read (a JVM of another user
// runs the classes too), and returns it. A package whose tests call it
// removes it in TestMain with RemoveJavaClasses.
func JavaClasses(t testing.TB) string {
	t.Helper()
	javac := RequireTool(t, "javac")
	src := Testdata(t, "jvm")
	javaClasses.once.Do(func() {
		dir, err := os.MkdirTemp("", "stallwatch-java-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			javaClasses.err = err
			return
		}
		javaClasses.dir = dir
		files, _ := filepath.Glob(filepath.Join(src, "*.java"))
		out, err := exec.Command(javac, append([]string{"-d", dir}, files...)...).CombinedOutput()
		if err != nil {
			javaClasses.err = fmt.Errorf("javac testdata/jvm: %v\n%s", err, out)
		}
	})
	if javaClasses.err != nil {
		t.Fatal(javaClasses.err)
	}
	return javaClasses.dir
}

// RemoveJavaClasses removes what JavaClasses compiled (call it from
// TestMain, after m.Run).
func RemoveJavaClasses() {
	if javaClasses.dir != "" {
		os.RemoveAll(javaClasses.dir)
	}
}

// StartJava runs `java flags… -cp <classes> Stall args…` (testdata/jvm)
// in a working directory of its own, waits for its "ready" line, and,
// once the test has killed it, removes what a killed JVM leaves behind
// (its hsperfdata file, its attach socket and trigger, its perf map).
func StartJava(t testing.TB, flags []string, args ...string) *Target {
	t.Helper()
	java := RequireTool(t, "java")
	classes := JavaClasses(t)
	argv := append(append(append([]string{}, flags...), "-cp", classes, "Stall"), args...)
	cmd := exec.Command(java, argv...)
	cmd.Dir = t.TempDir()
	var pid int
	t.Cleanup(func() { // runs after the target's own cleanup killed it
		if pid != 0 {
			RemoveJavaLeftovers(pid)
		}
	})
	tg := StartCmd(t, cmd)
	pid = tg.Pid
	tg.WaitLine(t, "ready", 60*time.Second)
	return tg
}

// RemoveJavaLeftovers removes the files a JVM of pid leaves in /tmp when it
// is killed: its hsperfdata, its attach socket and trigger, its perf map.
func RemoveJavaLeftovers(pid int) {
	p := strconv.Itoa(pid)
	tmp := "/tmp" // the JVM's java.io.tmpdir, whatever $TMPDIR says
	matches, _ := filepath.Glob(filepath.Join(tmp, "hsperfdata_*", p))
	for _, m := range append(matches,
		filepath.Join(tmp, ".java_pid"+p), filepath.Join(tmp, ".attach_pid"+p), filepath.Join(tmp, "perf-"+p+".map")) {
		os.Remove(m)
	}
}
