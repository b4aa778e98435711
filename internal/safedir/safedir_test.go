package safedir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

func TestCheckTrust(t *testing.T) {
	const me, other = 1000, 2000
	tests := []struct {
		uid  uint32
		mode uint32
		ok   bool
	}{
		{me, 0o755, true},
		{me, 0o700, true},
		{0, 0o755, true},                   // root's
		{0, 0o1777, true},                  // /tmp
		{me, 0o1777, true},                 // sticky and ours
		{me, 0o777, false},                 // anyone may swap our entries
		{me, 0o775, false},                 // the group may
		{0, 0o757, false},                  // others may
		{other, 0o755, false},              // its owner may
		{other, 0o1777, false},             // sticky, but its owner may do anything
		{other, 0o500, false},              // its owner may chmod it back
		{me, unix.S_ISVTX | 0o770, true},   // sticky: others cannot move ours
		{me, unix.S_ISGID | 0o2775, false}, // setgid is not sticky
	}
	for _, tt := range tests {
		st := unix.Stat_t{Uid: tt.uid, Mode: unix.S_IFDIR | tt.mode}
		err := checkTrust("/d", &st, me)
		if (err == nil) != tt.ok {
			t.Errorf("uid %d mode %#o: %v, want ok=%v", tt.uid, tt.mode, err, tt.ok)
		}
		var ue *UnsafeError
		if err != nil && (!errors.Is(err, ErrUnsafe) || !errors.As(err, &ue) || ue.UID != tt.uid) {
			t.Errorf("uid %d mode %#o: error %#v is not an *UnsafeError", tt.uid, tt.mode, err)
		}
	}
	msg := checkTrust("/srv/out", &unix.Stat_t{Uid: other, Mode: unix.S_IFDIR | 0o755}, me).Error()
	for _, want := range []string{"/srv/out", "uid 2000", "chown 1000 /srv/out", "chmod go-w /srv/out"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
}

func mustOpen(t *testing.T, path string) *Dir {
	t.Helper()
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestMkdirAll(t *testing.T) {
	base := t.TempDir()
	path := filepath.Join(base, "a", "b", "c")
	d, err := MkdirAll(path, 0o750)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.Name() != path {
		t.Errorf("name %s, want %s", d.Name(), path)
	}
	for _, p := range []string{filepath.Join(base, "a"), path} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o750 {
			t.Errorf("%s: %v %v, want mode 0750 whatever the umask", p, st, err)
		}
	}
	again, err := MkdirAll(path, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	// A world-writable directory is refused, existing or as a parent's
	// child just created.
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := MkdirAll(path, 0o755); !errors.Is(err, ErrUnsafe) {
		t.Errorf("MkdirAll(world-writable) = %v", err)
	}
	if _, err := Open(path); !errors.Is(err, ErrUnsafe) {
		t.Errorf("Open(world-writable) = %v", err)
	}
	if _, err := MkdirAll(filepath.Join(path, "x"), 0o755); err != nil {
		t.Errorf("a new directory under a shared one is ours: %v", err)
	}
}

func TestNamesAreOneComponent(t *testing.T) {
	d := mustOpen(t, t.TempDir())
	for _, name := range []string{"", ".", "..", "a/b", "../x", "/etc"} {
		if _, err := d.OpenDir(name); err == nil {
			t.Errorf("OpenDir(%q) succeeded", name)
		}
		if err := d.WriteFile(name, 0o644, func(io.Writer) error { return nil }); err == nil {
			t.Errorf("WriteFile(%q) succeeded", name)
		}
		if err := d.RemoveAll(name); err == nil {
			t.Errorf("RemoveAll(%q) succeeded", name)
		}
	}
}

func TestLinksAreNotFollowed(t *testing.T) {
	root := t.TempDir()
	victim := t.TempDir()
	if err := os.WriteFile(filepath.Join(victim, "f"), []byte("victim"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dir", "file"} {
		target := victim
		if name == "file" {
			target = filepath.Join(victim, "f")
		}
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	d := mustOpen(t, root)
	if _, err := d.OpenDir("dir"); !errors.Is(err, syscall.ELOOP) && !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("OpenDir(link) = %v, want ELOOP or ENOTDIR", err)
	}
	if _, err := d.Mkdir("dir", 0o755); err == nil {
		t.Error("Mkdir over a link opened the link's target")
	}
	if _, err := d.Open("file"); !errors.Is(err, ErrNotRegular) {
		t.Errorf("Open(link) = %v, want ErrNotRegular", err)
	}
	// WriteFile replaces the link itself.
	if err := d.WriteFile("file", 0o644, func(w io.Writer) error { _, err := io.WriteString(w, "ours"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(victim, "f")); string(b) != "victim" {
		t.Errorf("the link's target was written: %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(root, "file")); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Errorf("after WriteFile: %v %v", fi, err)
	}
	// RemoveAll removes the link, not the tree it points at; a link deep
	// inside a tree too.
	sub, err := d.Mkdir("tree", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := os.Symlink(victim, filepath.Join(root, "tree", "inner")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dir", "tree"} {
		if err := d.RemoveAll(name); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(root, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "f")); err != nil {
		t.Errorf("RemoveAll followed a link: %v", err)
	}
	if err := d.RemoveAll("missing"); err != nil {
		t.Errorf("RemoveAll(missing) = %v", err)
	}
}

func TestCreateTempCommitAbort(t *testing.T) {
	root := t.TempDir()
	d := mustOpen(t, root)
	f, err := d.CreateTemp(".x-*.tmp")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(f.TempName(), ".x-") || !strings.HasSuffix(f.TempName(), ".tmp") {
		t.Errorf("temporary name %s", f.TempName())
	}
	if fi, _ := os.Stat(filepath.Join(root, f.TempName())); fi.Mode().Perm() != 0o600 {
		t.Errorf("temporary file mode %v, want 0600 until committed", fi.Mode())
	}
	io.WriteString(f, "content")
	if err := f.Commit("final", 0o640); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(root, "final")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("committed: %v %v", fi, err)
	}
	if err := f.Commit("again", 0o640); err == nil {
		t.Error("Commit twice succeeded")
	}
	g, err := d.CreateTemp("abort-")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Abort(); err != nil {
		t.Fatal(err)
	}
	names, err := d.ReadDir()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"final"}) {
		t.Errorf("entries %v, want only final", names)
	}
}

func TestWriteFileFailureLeavesOld(t *testing.T) {
	root := t.TempDir()
	d := mustOpen(t, root)
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := d.WriteFile("f", 0o644, func(w io.Writer) error {
		io.WriteString(w, "half")
		return errors.New("renderer broke")
	})
	if err == nil || !strings.Contains(err.Error(), "renderer broke") {
		t.Fatalf("err %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "f")); string(b) != "old" {
		t.Errorf("file after a failed write: %q", b)
	}
	if names, _ := d.ReadDir(); len(names) != 1 {
		t.Errorf("temporaries left: %v", names)
	}
}

func TestRenameNoReplace(t *testing.T) {
	root := t.TempDir()
	d := mustOpen(t, root)
	for _, n := range []string{"a", "b"} {
		sub, err := d.Mkdir(n, 0o755)
		if err != nil {
			t.Fatal(err)
		}
		sub.Close()
	}
	// rename(2) would replace the empty directory b.
	if err := d.Rename("a", d, "b", NoReplace); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Rename onto an empty directory = %v, want ErrExist", err)
	}
	if err := d.Rename("a", d, "c", NoReplace); err != nil {
		t.Fatal(err)
	}
	names, _ := d.ReadDir()
	slices.Sort(names)
	if !slices.Equal(names, []string{"b", "c"}) {
		t.Errorf("entries %v", names)
	}
}

func TestReadRegularOnly(t *testing.T) {
	root := t.TempDir()
	d := mustOpen(t, root)
	fifo := filepath.Join(root, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "big"), make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	// Both would block forever on a FIFO without a writer.
	if _, err := d.Open("fifo"); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "named pipe") {
		t.Errorf("Open(fifo) = %v", err)
	}
	if _, err := OpenRegular(fifo); !errors.Is(err, ErrNotRegular) {
		t.Errorf("OpenRegular(fifo) = %v", err)
	}
	if _, err := OpenRegular(root); !errors.Is(err, ErrNotRegular) {
		t.Errorf("OpenRegular(dir) = %v", err)
	}
	if _, err := ReadRegular("/dev/zero", 1<<20); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadRegular(/dev/zero) = %v", err)
	}
	var tl *TooLargeError
	if _, err := d.ReadFile("big", 999); !errors.As(err, &tl) || tl.Size != 1000 || tl.Limit != 999 {
		t.Errorf("ReadFile over the limit = %v", err)
	}
	if b, err := d.ReadFile("big", 1000); err != nil || len(b) != 1000 {
		t.Errorf("ReadFile at the limit: %d bytes, %v", len(b), err)
	}
}

func TestWriteFileAt(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "out.txt")
	if err := WriteFileAt(p, 0o644, func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "x" {
		t.Errorf("content %q", b)
	}
	if err := WriteFileAt(filepath.Join(root, "missing", "out.txt"), 0o644, func(io.Writer) error { return nil }); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("into a missing directory: %v", err)
	}
}

// TestRacer: in a directory owned by an unprivileged user who swaps every
// entry for a link to a victim as fast as it can, writing relative to the
// descriptors we opened reaches only what we created. Open refuses such a
// directory; Wrap skips the check so the writes are tried under attack.
func TestRacer(t *testing.T) {
	r := testutil.StartRacer(t, false)
	if _, err := Open(r.Dir); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Open(a directory nobody owns) = %v, want ErrUnsafe", err)
	}
	f, err := os.Open(r.Dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Wrap(f, r.Dir)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// Write until the racer has swapped entries under us many times (at
	// least 300 rounds; a loaded machine may schedule it late).
	var ours, lost int
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; ; i++ {
		if i >= 300 && i%50 == 0 {
			if swapped, _ := r.Counts(t); swapped >= 50 || time.Now().After(deadline) {
				break
			}
		}
		name, sub, err := d.MkdirTemp(".tmp-", 0o755)
		if err != nil {
			lost++ // swapped between mkdirat and open: refused, not followed
			continue
		}
		if err := sub.WriteFile("report.txt", 0o644, func(w io.Writer) error { _, err := io.WriteString(w, "ours"); return err }); err != nil {
			t.Fatalf("writing into our own directory: %v", err)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(sub.Fd(), "report.txt", &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Uid != 0 || st.Mode&unix.S_IFMT != unix.S_IFREG {
			t.Errorf("the file written is not ours: %+v %v", st, err)
		}
		sub.Sync()
		sub.Close()
		if d.Rename(name, d, fmt.Sprintf("final-%d", i), NoReplace) == nil {
			ours++
		}
		d.RemoveAll(fmt.Sprintf("final-%d", i))
	}
	swapped, _ := r.Stop(t)
	t.Logf("%d directories written and renamed, %d lost to the racer; the racer swapped %d entries", ours, lost, swapped)
	if swapped < 50 {
		t.Fatalf("the racer swapped %d entries in 2 minutes: the test proved little", swapped)
	}
	r.CheckVictim(t)
}

// TestChmodOwned: the socket we bound gets its mode; a link or a file
// someone else owns put in its place is left alone.
func TestChmodOwned(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "dsd.socket")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := ChmodOwned(sock, 0o622); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Perm() != 0o622 || fi.Mode()&fs.ModeSocket == 0 {
		t.Errorf("socket after ChmodOwned: %v %v", fi.Mode(), err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := ChmodOwned(link, 0o622); err == nil {
		t.Error("ChmodOwned followed a link")
	}
	if fi, _ := os.Stat(victim); fi.Mode().Perm() != 0o600 {
		t.Errorf("the link's target is now %v", fi.Mode())
	}
	if os.Geteuid() == 0 {
		uid, gid := testutil.Nobody(t)
		theirs := filepath.Join(dir, "theirs")
		os.WriteFile(theirs, nil, 0o600)
		os.Chown(theirs, uid, gid)
		if err := ChmodOwned(theirs, 0o622); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("ChmodOwned(a file of nobody's) = %v", err)
		}
	}
}
