package procfs

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

func TestParseMaps(t *testing.T) {
	text := `55d0c6a00000-55d0c6a02000 r--p 00000000 fd:01 1311234                    /usr/bin/my prog
55d0c6a02000-55d0c6a07000 r-xp 00002000 fd:01 1311234                    /usr/bin/my prog
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 
7f1e2d000000-7f1e2d001000 r-xp 00000000 00:1f 77                         /tmp/jit-42.dump (deleted)
7ffd1a1e0000-7ffd1a201000 rw-p 00000000 00:00 0                          [stack]
`
	maps, err := ParseMaps(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) != 5 {
		t.Fatalf("got %d mappings, want 5", len(maps))
	}
	tests := []struct {
		i              int
		path           string
		deleted, exec  bool
		isFile         bool
		start, offset  uint64
		contains, miss uint64
	}{
		{0, "/usr/bin/my prog", false, false, true, 0x55d0c6a00000, 0, 0x55d0c6a01fff, 0x55d0c6a02000},
		{1, "/usr/bin/my prog", false, true, true, 0x55d0c6a02000, 0x2000, 0x55d0c6a02000, 0x55d0c6a07000},
		{2, "", false, false, false, 0x7f1e2c000000, 0, 0x7f1e2c000000, 0x7f1e2c021000},
		{3, "/tmp/jit-42.dump", true, true, true, 0x7f1e2d000000, 0, 0x7f1e2d000000, 0x7f1e2d001000},
		{4, "[stack]", false, false, false, 0x7ffd1a1e0000, 0, 0x7ffd1a1e0000, 0x7ffd1a201000},
	}
	for _, tt := range tests {
		m := maps[tt.i]
		if m.Path != tt.path || m.Deleted != tt.deleted || m.Exec() != tt.exec || m.IsFile() != tt.isFile ||
			m.Start != tt.start || m.Offset != tt.offset || !m.Contains(tt.contains) || m.Contains(tt.miss) {
			t.Errorf("mapping %d = %+v, want path %q deleted %v exec %v file %v start %#x offset %#x",
				tt.i, m, tt.path, tt.deleted, tt.exec, tt.isFile, tt.start, tt.offset)
		}
	}
	if _, err := ParseMaps("zzzz r-xp 0 0 0\n"); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad line: err = %v, want an error naming line 1", err)
	}
}

func TestParseStat(t *testing.T) {
	// A comm with spaces and parentheses must not shift the fields.
	line := "1778 (a) b (c) S 1776 1776 1051 0 -1 4194304 125 0 3 0 7 9 0 0 20 0 1 0 21416 2990080 393 18446744073709551615 1 2 3 0 0 0 0 6 0 1 0 0 17 1 0 0 0 0 0 4 5 6 7 8 9 10 0\n"
	st, err := ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if st.Comm != "a) b (c" || st.State != 'S' || st.MinorFaults != 125 || st.MajorFaults != 3 || st.Utime != 7 || st.Stime != 9 || st.StartTime != 21416 || st.Processor != 1 {
		t.Errorf("ParseStat = %+v", st)
	}
	if _, err := ParseStat([]byte("1778 (x) S 1")); err == nil {
		t.Error("short stat line: no error")
	}
}

func TestParseStatus(t *testing.T) {
	text := "Name:\tjulia\nState:\tS (sleeping)\nTgid:\t77\nPid:\t78\nPPid:\t1\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nNSpid:\t78\t5\nSigIgn:\t0000000000001000\nSigCgt:\t2000000181005ccf\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n"
	s, err := ParseStatus([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "julia" || s.State != 'S' || s.Tgid != 77 || s.Pid != 78 || s.InnerPid() != 5 ||
		s.Uid[0] != 1000 || s.Gid[1] != 100 || s.VoluntaryCtxtSwitches != 12 || s.NonvoluntaryCtxtSwitches != 3 ||
		s.SigIgn != 1<<12 || s.SigCgt&(1<<2) == 0 { // SIGPIPE ignored, SIGQUIT (3) caught
		t.Errorf("ParseStatus = %+v", s)
	}
	if s.SigCgt != 0x2000000181005ccf {
		t.Errorf("ParseStatus = %+v", s)
	}
}

func TestParseSyscall(t *testing.T) {
	s, err := ParseSyscall("230 0x0 0x0 0x7ffdd2f9b660 0x7ffdd2f9b6a0 0x0 0x0 0x7ffdd2f9b648 0x7f07c4c13503\n")
	if err != nil {
		t.Fatal(err)
	}
	if s.Nr != 230 || s.Args[2] != 0x7ffdd2f9b660 || s.SP != 0x7ffdd2f9b648 || s.PC != 0x7f07c4c13503 || s.Running {
		t.Errorf("ParseSyscall = %+v", s)
	}
	if s, err := ParseSyscall("running\n"); err != nil || !s.Running || s.Nr != -1 {
		t.Errorf("running: %+v %v", s, err)
	}
	if s, err := ParseSyscall("-1 0x7ffd 0x4005d0\n"); err != nil || !s.NotInSyscall || s.SP != 0x7ffd || s.PC != 0x4005d0 {
		t.Errorf("not in syscall: %+v %v", s, err)
	}
	if _, err := ParseSyscall("1 2 3"); err == nil {
		t.Error("garbage: no error")
	}
}

func TestParseKernelStack(t *testing.T) {
	text := "[<0>] hrtimer_nanosleep+0xb5/0x130\n[<0>] ext4_read+0x1/0x20 [ext4]\ngarbage\n[<ffffffff81000000>] do_syscall_64+0x71/0x290\n"
	fr := ParseKernelStack(text)
	if len(fr) != 3 {
		t.Fatalf("got %d frames, want 3: %+v", len(fr), fr)
	}
	if fr[0].Symbol != "hrtimer_nanosleep" || fr[0].Offset != 0xb5 || fr[0].Size != 0x130 {
		t.Errorf("frame 0 = %+v", fr[0])
	}
	if fr[1].Module != "[ext4]" {
		t.Errorf("frame 1 module = %q", fr[1].Module)
	}
	if fr[2].Addr != 0xffffffff81000000 {
		t.Errorf("frame 2 addr = %#x", fr[2].Addr)
	}
}

func TestLiveSelf(t *testing.T) {
	pid := os.Getpid()
	maps, err := ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	found := false
	for _, m := range maps {
		if m.Exec() && m.Path == exe {
			found = true
		}
	}
	if !found {
		t.Errorf("no executable mapping of %s in our own maps", exe)
	}
	tids, err := Threads(pid)
	if err != nil || len(tids) == 0 {
		t.Fatalf("Threads = %v, %v", tids, err)
	}
	st, err := ReadStatus(pid, pid)
	if err != nil || st.Pid != pid || st.InnerPid() != pid {
		t.Errorf("ReadStatus = %+v, %v", st, err)
	}
	if _, err := ReadStat(pid, pid); err != nil {
		t.Error(err)
	}
}

func TestGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	_, err := ReadStatus(cmd.Process.Pid, cmd.Process.Pid)
	if !errors.Is(err, ErrGone) {
		t.Errorf("ReadStatus of an exited pid: %v, want ErrGone", err)
	}
	if Alive(cmd.Process.Pid) {
		t.Error("Alive(exited pid) = true")
	}
}

func TestSyscallOfSleepingChild(t *testing.T) {
	testutil.RequireRoot(t)
	tg := testutil.Start(t, "sleep", "1000")
	if err := testutil.Eventually(5*time.Second, func() bool {
		s, err := ReadSyscall(tg.Pid, tg.Pid)
		return err == nil && !s.Running && s.Nr == int(syscall.SYS_CLOCK_NANOSLEEP)
	}); err != nil {
		s, err := ReadSyscall(tg.Pid, tg.Pid)
		t.Fatalf("sleep's syscall = %+v, %v; want clock_nanosleep", s, err)
	}
	fr, err := ReadKernelStack(tg.Pid, tg.Pid)
	if err != nil || len(fr) == 0 {
		t.Fatalf("kernel stack = %v, %v", fr, err)
	}
	if !strings.Contains(fr[0].Symbol, "sleep") {
		t.Errorf("innermost kernel frame %q, want a *sleep* function", fr[0].Symbol)
	}
}

// TestOpenInRoot runs a static program in a chroot and checks that links
// inside it resolve inside it, never to the host's files, with and without
// openat2.
func TestOpenInRoot(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildGo(t, "sleeper")
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	testutil.CopyExecutable(t, bin, filepath.Join(root, "sleeper"))
	must(os.MkdirAll(filepath.Join(root, "tmp"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	must(os.WriteFile(filepath.Join(root, "etc", "hostname"), []byte("inside\n"), 0o644))
	must(os.Symlink("/etc/hostname", filepath.Join(root, "tmp", "abs")))
	must(os.Symlink("../../../../../etc/hostname", filepath.Join(root, "tmp", "dotdot")))
	must(os.Mkdir(filepath.Join(root, "work"), 0o755))
	must(os.WriteFile(filepath.Join(root, "work", "rel.txt"), []byte("relative\n"), 0o644))

	cmd := exec.Command("/sleeper")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/work"
	tg := testutil.StartCmd(t, cmd)
	tg.WaitLine(t, "ready", 10*time.Second)

	for _, slow := range []bool{false, true} {
		forceSlowOpen = slow
		for _, tc := range []struct{ name, want string }{
			{"/tmp/abs", "inside\n"},
			{"/tmp/dotdot", "inside\n"},
			{"/etc/hostname", "inside\n"},
			{"rel.txt", "relative\n"},
		} {
			f, err := OpenInRoot(tg.Pid, tc.name, false)
			if err != nil {
				t.Errorf("slow=%v OpenInRoot(%s): %v", slow, tc.name, err)
				continue
			}
			b, _ := io.ReadAll(f)
			f.Close()
			if string(b) != tc.want {
				t.Errorf("slow=%v OpenInRoot(%s) read %q, want %q (escaped the root?)", slow, tc.name, b, tc.want)
			}
		}
		if f, err := OpenInRoot(tg.Pid, "/tmp/abs", true); err == nil {
			f.Close()
			t.Errorf("slow=%v: noFollowFinal opened a symlink", slow)
		}
	}
	forceSlowOpen = false
}

func TestReadInto(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	if err := os.WriteFile(name, []byte("12345678"), 0o600); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 8)
	b, err := ReadInto(name, buf)
	if err != nil || string(b) != "12345678" || &b[:1][0] != &buf[:1][0] {
		t.Errorf("a file that fits exactly: %q, %v (or not read into the buffer)", b, err)
	}
	if _, err := ReadInto(name, make([]byte, 0, 7)); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("a file larger than the buffer: %v, want an error naming it", err)
	}
	if _, err := ReadInto(filepath.Join(dir, "none"), buf); !errors.Is(err, ErrGone) {
		t.Errorf("a missing file: %v, want ErrGone", err)
	}
}
