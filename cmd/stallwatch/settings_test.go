package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/sampler"
)

// daemonSettingCases are settings the daemon must refuse the same way at
// start, with --check and on SIGHUP (env: Datadog's environment, fixed
// for a running daemon, so not reloaded).
func daemonSettingCases() []struct {
	name, rule string
	env        []string
	want       string
} {
	limit, _ := sampler.FreqLimit()
	return []struct {
		name, rule string
		env        []string
		want       string
	}{
		{name: "freq above the kernel's limit", rule: "    freq: 100000000\n", want: "rule a (line 3): freq 100000000: above " + map[bool]string{true: "kernel.perf_event_max_sample_rate", false: "100000 Hz"}[limit < 100000]},
		{name: "capture-for past its bound", rule: "    capture-for: 100000h\n", want: "capture-for 100000h0m0s: must be positive and at most 10m0s"},
		{name: "an empty heartbeat file", rule: "    heartbeat-file: ''\n", want: "heartbeat-file: an empty path"},
		{name: "DD_TRACE_AGENT_PORT out of range", env: []string{"DD_AGENT_HOST=127.0.0.1", "DD_TRACE_AGENT_PORT=99999"}, want: `port "99999"`},
		{name: "DD_DOGSTATSD_PORT out of range", env: []string{"DD_AGENT_HOST=127.0.0.1", "DD_DOGSTATSD_PORT=99999"}, want: `port "99999"`},
		{name: "DD_DOGSTATSD_PORT zero", env: []string{"DD_AGENT_HOST=127.0.0.1", "DD_DOGSTATSD_PORT=0"}, want: `port "0"`},
	}
}

func settingConfig(rule string) string {
	return "out: OUT\nrules:\n  - name: a\n    match: {cmdline: '^" + marker() + "$', user: root}\n" + rule + "    heartbeat-proc: true\n"
}

// TestDaemonSettingsChecked: one validation, at start and by --check: a
// setting the daemon cannot use is refused with exit 2 and its reason
// before anything runs.
func TestDaemonSettingsChecked(t *testing.T) {
	for _, c := range daemonSettingCases() {
		t.Run(c.name, func(t *testing.T) {
			e := newDaemonEnv(t, settingConfig(c.rule))
			for _, check := range []bool{true, false} {
				args := []string{"daemon", "--config", e.config, "--control-socket", e.socket, "--state-dir", filepath.Join(e.dir, "state")}
				if check {
					args = append(args, "--check")
				}
				cmd := exec.Command(stallwatchBin(t), args...)
				cmd.Env = append(os.Environ(), c.env...)
				sw := testutil.StartCmd(t, cmd)
				select {
				case <-sw.Done():
				case <-time.After(30 * time.Second):
					t.Fatalf("check %v: the daemon started with it; log:\n%s", check, sw.Stderr())
				}
				code := -1
				if ee, ok := sw.ExitErr().(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if sw.ExitErr() == nil {
					code = 0
				}
				if code != exitUsage || !strings.Contains(sw.Stderr(), c.want) {
					t.Errorf("check %v: exit %d, want %d and %q; stderr:\n%s", check, code, exitUsage, c.want, sw.Stderr())
				}
			}
		})
	}
}

// TestDaemonReloadChecked: SIGHUP applies the same validation: a rule
// setting the daemon could not use is refused and the rules in force go
// on.
func TestDaemonReloadChecked(t *testing.T) {
	testutil.RequireRoot(t)
	good := settingConfig("")
	e := newDaemonEnv(t, good)
	e.start(t)
	refused := 0
	for _, c := range daemonSettingCases() {
		if c.rule == "" {
			continue
		}
		e.write(t, settingConfig(c.rule))
		if err := e.sw.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		refused++
		if err := testutil.Eventually(20*time.Second, func() bool {
			return strings.Count(e.sw.Stderr(), "configuration refused") >= refused || strings.Count(e.sw.Stderr(), "SIGHUP: configuration read") > 0
		}); err != nil {
			t.Fatalf("%s: SIGHUP not answered; log:\n%s", c.name, e.sw.Stderr())
		}
		if strings.Contains(e.sw.Stderr(), "SIGHUP: configuration read") {
			t.Fatalf("%s: reloaded; log:\n%s", c.name, e.sw.Stderr())
		}
		if !strings.Contains(e.sw.Stderr(), c.want) {
			t.Errorf("%s: refused without %q; log:\n%s", c.name, c.want, e.sw.Stderr())
		}
	}
	if e.status(t).MaxPerHour != 30 {
		t.Errorf("the configuration in force changed")
	}
}
