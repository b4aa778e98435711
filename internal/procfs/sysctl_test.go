package procfs

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestCapSets: the capability lines of a status file, as the kernel
// writes them (a process with CAP_SYS_PTRACE and CAP_PERFMON added to
// its permitted and effective sets, its bounding set full).
func TestCapSets(t *testing.T) {
	text := "Name:\tsw\nPid:\t9\nCapInh:\t0000000000000000\nCapPrm:\t0000004000080000\nCapEff:\t0000004000080000\nCapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n"
	s, err := ParseStatus([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		set  CapSet
		c    int
		want bool
	}{
		{s.CapEff, 19, true},  // CAP_SYS_PTRACE
		{s.CapEff, 38, true},  // CAP_PERFMON
		{s.CapEff, 21, false}, // CAP_SYS_ADMIN
		{s.CapPrm, 19, true},
		{s.CapBnd, 40, true},
		{s.CapBnd, 41, false},
		{s.CapInh, 19, false},
		{s.CapAmb, 38, false},
		{s.CapEff, 64, false},
		{s.CapEff, -1, false},
	} {
		if got := tc.set.Has(tc.c); got != tc.want {
			t.Errorf("%#x.Has(%d) = %v, want %v", uint64(tc.set), tc.c, got, tc.want)
		}
	}
	if s, _ := ParseStatus([]byte("Pid:\t1\nCapEff:\tzz\n")); s.CapEff != 0 {
		t.Errorf("a malformed mask reads as %#x, want the empty set", uint64(s.CapEff))
	}
}

// TestSysctl reads real settings as sysctl(8) names them: one against its
// file, one this kernel lacks, one that is not an integer.
func TestSysctl(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if got, err := Sysctl("kernel.pid_max"); err != nil || got != want {
		t.Errorf("kernel.pid_max = %d, %v; want %d", got, err, want)
	}
	_, err = Sysctl("kernel.no_such_setting")
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "kernel.no_such_setting") {
		t.Errorf("a missing setting: %v, want fs.ErrNotExist (not ErrGone) naming it", err)
	}
	if _, err := Sysctl("kernel.ostype"); err == nil || !strings.Contains(err.Error(), "kernel.ostype") {
		t.Errorf("kernel.ostype (Linux) read as an integer: %v", err)
	}
}
