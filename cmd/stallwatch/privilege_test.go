package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// The capabilities the systemd unit and the DaemonSet grant, as setpriv
// names them.
var deployCaps = []string{"perfmon", "sys_ptrace", "syslog", "net_raw"}

// capsUser runs stallwatch as user nobody with exactly caps (ambient, as
// the systemd unit gives them), through util-linux's setpriv.
type capsUser struct {
	setpriv, bin string
}

func newCapsUser(t *testing.T) *capsUser {
	t.Helper()
	testutil.RequireRoot(t)
	n := &capsUser{setpriv: testutil.RequireTool(t, "setpriv")}
	// nobody must reach the binary: a directory of its own, not the
	// test's private one.
	dir, err := os.MkdirTemp("", "stallwatch-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n.bin = filepath.Join(dir, "stallwatch")
	testutil.CopyExecutable(t, stallwatchBin(t), n.bin)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return n
}

// dir is a directory owned by nobody (captures, state).
func (n *capsUser) dir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(filepath.Dir(n.bin), fmt.Sprintf("d%d", time.Now().UnixNano()))
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return d
}

func (n *capsUser) cmd(caps []string, args ...string) *exec.Cmd {
	set := "-all"
	if len(caps) > 0 {
		set = "+" + strings.Join(caps, ",+")
	}
	full := append([]string{"--reuid=nobody", "--regid=nogroup", "--clear-groups", "--inh-caps=" + set, "--ambient-caps=" + set, "--", n.bin}, args...)
	return exec.Command(n.setpriv, full...)
}

func without(caps []string, drop string) []string {
	var out []string
	for _, c := range caps {
		if c != drop {
			out = append(out, c)
		}
	}
	return out
}

// TestLeastPrivilege: as user nobody with only the deployed capabilities,
// stallwatch records, snapshots and taps another user's process with
// nothing missing; with one of them gone, the daemon refuses to start
// (exit 3) and names it.
func TestLeastPrivilege(t *testing.T) {
	testutil.RequirePerf(t)
	nb := newCapsUser(t)
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port)
	c.Close()
	// The target is root's: another user's process, as a service is; its
	// executable readable by all, as a service's is.
	beater := filepath.Join(filepath.Dir(nb.bin), "beater")
	testutil.CopyExecutable(t, beaterPath(t), beater)
	target := testutil.StartCmd(t, exec.Command(beater, "-interval", "50ms", "-metric", "priv.beat", "-statsd", "127.0.0.1:"+port, "-threads", "2", "-requests=false"))
	target.WaitLine(t, "ready", 20*time.Second)
	pid := strconv.Itoa(target.Pid)

	t.Run("record", func(t *testing.T) {
		out := nb.dir(t)
		b, err := nb.cmd(deployCaps, "record", "-p", pid, "--duration", "1s", "--snapshot", "--out", out).CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		if strings.Contains(string(b), "going on without") && !strings.Contains(string(b), "CAP_SYS_ADMIN") {
			t.Errorf("something is missing:\n%s", b)
		}
		info := readCaptureJSON(t, out)
		if info.Counts.Samples+info.Counts.OffCPU == 0 || info.Counts.Threads == 0 || !info.Settings.Ptrace || !info.Settings.Kernel {
			t.Errorf("capture.json: %+v\n%s", info, b)
		}
	})
	t.Run("snapshot", func(t *testing.T) {
		b, err := nb.cmd(deployCaps, "snapshot", "-p", pid).CombinedOutput()
		if err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		// Stopped under ptrace, and named from the executable.
		for _, want := range []string{"User stacks read under ptrace", "main.worker"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("the snapshot lacks %q:\n%s", want, b)
			}
		}
		if strings.Contains(string(b), "needs CAP_SYS_PTRACE") {
			t.Errorf("snapshot:\n%s", b)
		}
	})
	t.Run("tap", func(t *testing.T) {
		cmd := nb.cmd(deployCaps, "watch", "-p", pid, "--heartbeat-tap", "udp://:"+port, "--metric", "priv.beat", "--stall-after", "2s",
			"--max-captures", "0", "--baseline-freq", "0", "--out", nb.dir(t))
		sw := testutil.StartCmd(t, cmd)
		waitLog(t, sw, "heartbeat healthy", 30*time.Second)
		_ = sw.Cmd.Process.Signal(syscall.SIGTERM)
		if code := exitStatusOf(t, sw, 20*time.Second); code != 0 {
			t.Errorf("exit %d\n%s", code, sw.Stderr())
		}
	})

	config := filepath.Join(nb.dir(t), "stallwatch.yaml")
	if err := os.WriteFile(config, []byte("rules:\n  - name: beater\n    match: {cmdline: 'beater .*priv.beat'}\n    heartbeat-tap: udp://:"+port+"\n    metric: priv.beat\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	daemonArgs := func() []string {
		d := nb.dir(t)
		return []string{"daemon", "--config", config, "--out", filepath.Join(d, "captures"), "--state-dir", d, "--control-socket", filepath.Join(d, "run", "control.sock")}
	}
	t.Run("daemon", func(t *testing.T) {
		sw := testutil.StartCmd(t, nb.cmd(deployCaps, daemonArgs()...))
		waitLog(t, sw, "msg=ready", 30*time.Second)
		waitLog(t, sw, "heartbeat healthy", 30*time.Second)
		_ = sw.Cmd.Process.Signal(syscall.SIGTERM)
		if code := exitStatusOf(t, sw, 20*time.Second); code != 0 {
			t.Errorf("exit %d\n%s", code, sw.Stderr())
		}
	})
	for _, drop := range deployCaps {
		t.Run("without "+drop, func(t *testing.T) {
			cmd := nb.cmd(without(deployCaps, drop), daemonArgs()...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errorsAs(err, &ee) || ee.ExitCode() != exitNotPermitted {
				t.Fatalf("%v, want exit %d\n%s", err, exitNotPermitted, stderr.String())
			}
			want := "needs CAP_" + strings.ToUpper(drop)
			if !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "cap_"+drop) {
				t.Errorf("the message does not name %s:\n%s", want, stderr.String())
			}
		})
	}
}

func errorsAs(err error, target **exec.ExitError) bool {
	ee, ok := err.(*exec.ExitError)
	if ok {
		*target = ee
	}
	return ok
}

// captureFacts is what these tests read of capture.json.
type captureFacts struct {
	PID     int      `json:"pid"`
	Command []string `json:"command"`
	Counts  struct {
		Samples    int `json:"samples"`
		OffCPU     int `json:"offcpu_intervals"`
		Threads    int `json:"threads"`
		JITSources int `json:"jit_sources"`
	} `json:"counts"`
	Settings struct {
		Kernel bool `json:"kernel"`
		Ptrace bool `json:"ptrace"`
	} `json:"settings"`
}

// readCaptureJSON reads the one capture under out.
func readCaptureJSON(t *testing.T, out string) captureFacts {
	t.Helper()
	ents, err := os.ReadDir(out)
	if err != nil || len(ents) != 1 {
		t.Fatalf("captures under %s: %v %v", out, ents, err)
	}
	return readInfo(t, filepath.Join(out, ents[0].Name()))
}

func readInfo(t *testing.T, dir string) captureFacts {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "capture.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var info captureFacts
	b, _ := io.ReadAll(f)
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatalf("capture.json: %v", err)
	}
	return info
}
