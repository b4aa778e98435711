package preflight

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/perms"
	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/sampler"
)

var errRefused = fmt.Errorf("perf_event_open(cpu-clock) on pid 7: %w", unix.EACCES)

// TestDiagnose: what the probes found becomes one error that names every
// refusal and the fixes that grant them all.
func TestDiagnose(t *testing.T) {
	needs := Needs{Verb: "record", PID: 7, Rates: []Rate{{"--freq", 997}}, Sample: true, Kernel: true, OffCPU: true, Snapshot: true, Ptrace: true}
	// A user who may be granted every capability.
	user := perms.Self{Bnd: 1<<41 - 1, HostUserNS: true}
	base := facts{probePID: 7, ours: true, paranoid: 2, paranoidOK: true, rateLimit: 100000, self: user}
	tests := []struct {
		name        string
		needs       Needs
		f           func(*facts)
		permission  bool
		want, avoid []string
	}{
		{"everything allowed", needs, func(*facts) {}, false, nil, nil},
		{"paranoid 2, our own process: kernel frames and off-CPU refused, user frames allowed", needs, func(f *facts) {
			f.perf = sampler.ProbeResult{OnCPU: errRefused, OffCPU: errRefused}
		}, true, []string{
			"not permitted: on-CPU samples with kernel frames (perf_event_open): permission denied; needs CAP_PERFMON, or kernel.perf_event_paranoid <= 1 (it is 2)",
			"not permitted: off-CPU samples",
			"sudo setcap cap_perfmon+ep ", "sudo sysctl kernel.perf_event_paranoid=1", "run stallwatch as root",
			"Or ask for less: --no-kernel --no-offcpu (user frames only, no off-CPU time)",
		}, []string{"paranoid=2"}},
		{"paranoid 3: nothing allowed, flags do not help", needs, func(f *facts) {
			f.paranoid = 3
			f.perf = sampler.ProbeResult{OnCPU: errRefused, OnCPUUser: errRefused, OffCPU: errRefused}
		}, true, []string{"not permitted: on-CPU samples (perf_event_open)", "kernel.perf_event_paranoid <= 2 (it is 3)", "sysctl kernel.perf_event_paranoid=1"},
			[]string{"Or ask for less"}},
		{"another user's process: a sysctl does not help", needs, func(f *facts) {
			f.ours = false
			f.perf = sampler.ProbeResult{OnCPU: errRefused, OnCPUUser: errRefused, OffCPU: errRefused}
			f.procErr = unix.EACCES
		}, true, []string{"reading pid 7's memory map", "CAP_PERFMON (pid 7 belongs to another user)", "setcap cap_perfmon,cap_sys_ptrace+ep"},
			[]string{"sysctl", "Or ask for less"}},
		{"privileged but refused: a security module", needs, func(f *facts) {
			f.self.Eff = 1 << perms.CapPerfmon
			f.self.Confined = "docker-default"
			f.perf = sampler.ProbeResult{OnCPU: errRefused, OnCPUUser: errRefused}
		}, true, []string{"a permission CAP_PERFMON does not give", "confined by a security module (label docker-default)"}, []string{"sysctl", "setcap", "run stallwatch as root"}},
		{"root in a rootless container: never told to run as root", needs, func(f *facts) {
			f.self = perms.Self{Root: true, Eff: 1<<41 - 1, Bnd: 1<<41 - 1}
			f.perf = sampler.ProbeResult{OnCPU: errRefused, OnCPUUser: errRefused, OffCPU: errRefused}
			f.memErr = unix.EPERM
		}, true, []string{"stallwatch runs as root", "in a user namespace of its own"}, []string{"run stallwatch as root", "setcap", "sysctl"}},
		{"root whose container dropped CAP_PERFMON", needs, func(f *facts) {
			f.self = perms.Self{Root: true, Eff: 1 << perms.CapSysPtrace, Bnd: 1 << perms.CapSysPtrace, HostUserNS: true}
			f.perf = sampler.ProbeResult{OnCPU: errRefused, OffCPU: errRefused}
		}, true, []string{"give stallwatch CAP_PERFMON where it runs", "stallwatch runs as root without it"}, []string{"run stallwatch as root", "setcap"}},
		{"what stallwatch can do without is listed, and granted by the same setcap", needs, func(f *facts) {
			f.perf = sampler.ProbeResult{OffCPU: errRefused}
			f.memErr, f.stackErr, f.kallsymsHid, f.kptr = unix.EPERM, unix.EACCES, true, 1
		}, true, []string{
			"also missing, stallwatch would go on without it: stopping threads to read their stacks (ptrace)",
			"also missing, stallwatch would go on without it: kernel function names (/proc/kallsyms hides its addresses); needs CAP_SYSLOG (kernel.kptr_restrict is 1); kernel frames show as [kernel]",
			"kernel stacks of blocked threads", "setcap cap_perfmon,cap_sys_admin,cap_sys_ptrace,cap_syslog+ep", "Or ask for less: --no-offcpu (no off-CPU time)",
		}, nil},
		{"settings and permissions at once", Needs{Verb: "watch", PID: 7, Rates: []Rate{{"--freq", 500000}, {"--baseline-freq", 200000}}, Sample: true, OffCPU: true, Out: "/ro", OutFlag: "--out"}, func(f *facts) {
			f.rateLimit, f.rateSysctl = 50000, true
			f.perf = sampler.ProbeResult{OffCPU: errRefused}
			f.outErr = errors.New("on a read-only file system")
		}, true, []string{
			"cannot watch pid 7", "--freq 500000: above kernel.perf_event_max_sample_rate (50000); use --freq 50000 or less",
			"--baseline-freq 200000: above kernel.perf_event_max_sample_rate (50000)", "--out /ro: on a read-only file system", "not permitted: off-CPU samples",
		}, nil},
		{"the daemon: every process, a packet socket, capabilities it may not do without", Needs{
			Verb: "run the daemon", Sample: true, Kernel: true, Snapshot: true, Ptrace: true, PacketSocket: true,
			AnyProcess: []perms.Op{perms.SampleAny, perms.ReadOthers, perms.KernelNames, perms.PacketSocket},
		}, func(f *facts) {
			f.kallsymsHid, f.kptr = true, 1
			f.packetErr = unix.EPERM
			f.self.Eff = 1 << perms.CapPerfmon
		}, true, []string{
			"not permitted: kernel function names (/proc/kallsyms hides its addresses); needs CAP_SYSLOG",
			"not permitted: reading DogStatsD datagrams off the wire (a packet socket, for --heartbeat-tap); needs CAP_NET_RAW",
			"not permitted: reading other users' processes' memory and stopping their threads (ptrace); needs CAP_SYS_PTRACE",
			"setcap cap_net_raw,cap_sys_ptrace,cap_syslog+ep",
		}, []string{"Or ask for less", "CAP_PERFMON", "would go on without it: kernel function names"}},
		{"a rate the sysctl can allow", Needs{Verb: "watch", PID: 7, Rates: []Rate{{"--freq", 20000}}}, func(f *facts) {
			f.rateLimit, f.rateSysctl = 10000, true
		}, false, []string{"`sudo sysctl kernel.perf_event_max_sample_rate=20000`"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := base
			tc.f(&f)
			problems, warnings := diagnose(tc.needs, f)
			if len(problems) == 0 {
				if len(tc.want) > 0 {
					t.Fatalf("no problem found; want %q", tc.want)
				}
				return
			}
			e := &Error{Verb: tc.needs.Verb, PID: tc.needs.PID, Problems: problems, Warnings: warnings}
			e.Grant, e.Less = fixes(tc.needs, f, problems, warnings)
			msg := e.Error()
			if e.NotPermitted() != tc.permission {
				t.Errorf("NotPermitted %v, want %v", e.NotPermitted(), tc.permission)
			}
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the message lacks %q:\n%s", w, msg)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(msg, a) {
					t.Errorf("the message says %q:\n%s", a, msg)
				}
			}
		})
	}
}

func TestNoProcess(t *testing.T) {
	var npe *NoProcessError
	if _, err := Check(Needs{Verb: "record", PID: 999999999}); !errors.As(err, &npe) || err.Error() != "no process 999999999" {
		t.Errorf("a missing pid: %v", err)
	}
	// A thread id is not a process.
	tids, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range tids {
		tid, _ := strconv.Atoi(e.Name())
		if tid == os.Getpid() {
			continue
		}
		_, err := Check(Needs{Verb: "record", PID: tid})
		if !errors.As(err, &npe) || npe.Thread != os.Getpid() || !strings.Contains(err.Error(), "is a thread of process") {
			t.Errorf("thread %d: %v", tid, err)
		}
		break
	}
	// A zombie: exited, not reaped.
	cmd := exec.Command("/bin/true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	err = testutil.Eventually(10*time.Second, func() bool {
		_, err := Check(Needs{Verb: "record", PID: cmd.Process.Pid})
		return errors.As(err, &npe) && npe.Zombie
	})
	if err != nil {
		t.Errorf("a zombie is not said to have exited")
	}
}

// TestCheckOut: --out is tried as a capture will use it.
func TestCheckOut(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		out  string
		want string // "" when fine
	}{
		{dir, ""},
		{filepath.Join(dir, "new", "deeper"), ""},
		{file, "it is a file, not a directory"},
		{filepath.Join(file, "sub"), "not a directory"},
		{"/proc/stallwatch-test", "does not hold directories"},
		{shared, "can be written by every user"},
	}
	for _, tc := range tests {
		err := checkOut(tc.out)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.out, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.out, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("checking a missing --out made it: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".stallwatch-check-*")); len(left) > 0 {
		t.Errorf("checks left %v behind", left)
	}
	var ue *safedir.UnsafeError
	if err := checkOut(shared); !errors.As(err, &ue) {
		t.Errorf("a directory everyone can write: %v, want a *safedir.UnsafeError", err)
	}
}

// TestProbeAsRoot: with every privilege, nothing is missing for our own
// process, and the probes leave no descriptor open.
func TestProbeAsRoot(t *testing.T) {
	testutil.RequirePerf(t)
	before := testutil.OpenFDs(t)
	warnings, err := Check(Needs{Verb: "record", PID: os.Getpid(), Rates: []Rate{{"--freq", 997}}, Sample: true, Kernel: true, OffCPU: true,
		Snapshot: true, Ptrace: true, Out: t.TempDir(), OutFlag: "--out"})
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 && len(warnings) > 0 {
		t.Errorf("warnings as root: %v", warnings)
	}
	if after := testutil.OpenFDs(t); after != before {
		t.Errorf("%d descriptors open after the probes, %d before", after, before)
	}
}
