package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Nobody returns the uid and gid of the unprivileged user "nobody".
func Nobody(t testing.TB) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup("nobody")
	if err != nil {
		Skip(t, "no user nobody: %v", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// SharedTempDir returns a new directory under os.TempDir() that every user
// may enter (mode 0755; t.TempDir's are 0700), removed when the test ends:
// for files an unprivileged process must reach.
func SharedTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "stallwatch-shared-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// StartAsNobody runs the Go program testdata/<dir> as user nobody (root
// only), like Start: a real unprivileged process beside the test.
func StartAsNobody(t testing.TB, dir string, args ...string) *Target {
	t.Helper()
	RequireRoot(t)
	uid, gid := Nobody(t)
	bin := filepath.Join(SharedTempDir(t), filepath.Base(dir))
	if err := copyFile(BuildGo(t, dir), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return StartCmd(t, cmd)
}

// Racer is an unprivileged process (user nobody, testdata/racer) beside a
// directory that root writes into: it renames every entry it can away and
// puts a symbolic link to Victim in its place, as fast as it can.
type Racer struct {
	Dir    string // the directory under attack
	Victim string // a root-only directory holding one file, "keep"
	tg     *Target
}

// StartRacer makes Dir — owned by nobody, or with sticky owned by root
// and mode 1777 as /tmp is — and Victim, and starts the racer on Dir; it
// first plants links to Victim under the names in plant.
func StartRacer(t testing.TB, sticky bool, plant ...string) *Racer {
	t.Helper()
	uid, gid := Nobody(t)
	shared := SharedTempDir(t)
	r := &Racer{Dir: filepath.Join(shared, "out"), Victim: filepath.Join(shared, "victim")}
	if err := os.Mkdir(r.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if sticky {
		if err := os.Chmod(r.Dir, 0o777|os.ModeSticky); err != nil {
			t.Fatal(err)
		}
	} else if err := os.Chown(r.Dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(r.Victim, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.Victim, "keep"), []byte("victim"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-dir", r.Dir, "-victim", r.Victim}
	if len(plant) > 0 {
		args = append(args, "-plant", strings.Join(plant, ","))
	}
	r.tg = StartAsNobody(t, "racer", args...)
	r.tg.WaitLine(t, "ready", 30*time.Second)
	return r
}

// Counts asks the running racer how many entries it swapped for links so
// far and how many of its renames the kernel refused.
func (r *Racer) Counts(t testing.TB) (swapped, refused int) {
	t.Helper()
	r.tg.Cmd.Process.Signal(syscall.SIGUSR1)
	line := r.tg.WaitLine(t, "racer: ", 30*time.Second)
	if _, err := fmt.Sscanf(line, "racer: %d swapped, %d refused", &swapped, &refused); err != nil {
		t.Fatalf("the racer's report %q: %v", line, err)
	}
	return swapped, refused
}

// Stop ends the racer and returns how many entries it swapped for links
// and how many of its renames the kernel refused.
func (r *Racer) Stop(t testing.TB) (swapped, refused int) {
	t.Helper()
	r.tg.Cmd.Process.Signal(syscall.SIGTERM)
	<-r.tg.Done()
	if _, err := fmt.Sscanf(r.tg.Stderr(), "racer: %d swapped, %d refused", &swapped, &refused); err != nil {
		t.Fatalf("the racer's report %q: %v", r.tg.Stderr(), err)
	}
	return swapped, refused
}

// CheckVictim fails the test if anything reached the victim directory:
// its mode changed, or a file appeared in it or changed.
func (r *Racer) CheckVictim(t testing.TB) {
	t.Helper()
	st, err := os.Stat(r.Victim)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the victim directory is now %v (%v), want 0700: root chmodded through a link", st.Mode(), err)
	}
	entries, _ := os.ReadDir(r.Victim)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != "keep" {
		t.Errorf("the victim directory holds %v: root wrote through a link", names)
	}
	if st, err := os.Stat(filepath.Join(r.Victim, "keep")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the victim file is now %v (%v), want 0600", st.Mode(), err)
	}
}
