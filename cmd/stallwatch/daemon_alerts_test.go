package main

import (
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/dsdtest"
	"github.com/stallwatch/stallwatch/internal/intaketest"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// TestDaemonAlertsUploadsHooks: the daemon's captures go through the
// alerts, uploads and hooks that watch has — one DogStatsD client, one
// upload queue and one hook runner for every target. Two rules watch a
// process each; both freeze. Each stall is alerted to a real DogStatsD
// socket and each capture uploaded to a stand-in agent, tagged with the
// host's tags and its rule's service and tags; the rule with hooks runs
// them for its process with its service in their environment; the
// recovery closes the stall's thread.
func TestDaemonAlertsUploadsHooks(t *testing.T) {
	testutil.RequirePerf(t)
	testutil.RequirePtrace(t)
	tagA, tagB := marker(), marker()
	dsd := dsdtest.ListenUDP(t)
	intake := intaketest.Start(t)
	e := newDaemonEnv(t, "")
	captured, recovered := e.dir+"/captured.env", e.dir+"/recovered.env"
	e.write(t, `
out: OUT
tags: dc:east
defaults:
  stall-after: 1s
  heartbeat-proc: true
  capture-for: 300ms
  max-captures: 1
  recapture-after: 1h
rules:
  - name: bank
    match:
      cmdline: 'beater .*-metric `+tagA+`'
    service: bank
    tags: team:payments
    on-capture: env > '`+captured+`'
    on-recover: env > '`+recovered+`'
  - name: plain
    match:
      cmdline: 'beater .*-metric `+tagB+`'
`)
	a, b := startBeater(t, tagA), startBeater(t, tagB)
	// Host settings from the command line, as a unit's ExecStart= gives them.
	e.start(t, "--statsd", dsd.Addr, "--upload", intake.URL)
	waitLog(t, e.sw, "alerts on", 10*time.Second)
	waitLog(t, e.sw, "uploads on", 10*time.Second)
	e.waitTarget(t, a.Pid, "healthy", 30*time.Second, healthy)
	e.waitTarget(t, b.Pid, "healthy", 30*time.Second, healthy)

	for _, tg := range []*testutil.Target{a, b} {
		if err := syscall.Kill(tg.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer syscall.Kill(tg.Pid, syscall.SIGCONT)
	}

	// Each stall's event, named and tagged as its rule says.
	stalls := map[int]*dsdtest.Event{}
	dsd.Collect(t, 60*time.Second, func(m []dsdtest.Message) bool {
		for _, x := range m {
			if x.Event == nil || x.Event.AlertType != "error" {
				continue
			}
			if v, ok := dsdtest.Tag(x.Event.Tags, "pid"); ok {
				pid, _ := strconv.Atoi(v)
				stalls[pid] = x.Event
			}
		}
		return stalls[a.Pid] != nil && stalls[b.Pid] != nil
	})
	wantTags := func(what string, tags []string, want []string, service bool) {
		t.Helper()
		for _, w := range want {
			if !slices.Contains(tags, w) {
				t.Errorf("%s: tags %v lack %s", what, tags, w)
			}
		}
		if _, ok := dsdtest.Tag(tags, "service"); ok != service {
			t.Errorf("%s: tags %v: a service tag is %v, want %v", what, tags, ok, service)
		}
	}
	pa, pb := strconv.Itoa(a.Pid), strconv.Itoa(b.Pid)
	if ev := stalls[a.Pid]; !strings.HasPrefix(ev.Title, "bank (pid "+pa+") stalled") {
		t.Errorf("stall title %q", ev.Title)
	}
	if ev := stalls[b.Pid]; !strings.HasPrefix(ev.Title, "beater (pid "+pb+") stalled") {
		t.Errorf("stall title %q: a rule without a service names the process", ev.Title)
	}
	wantTags("bank's stall", stalls[a.Pid].Tags, []string{"service:bank", "team:payments", "dc:east", "process:beater", "pid:" + pa}, true)
	wantTags("plain's stall", stalls[b.Pid].Tags, []string{"dc:east", "process:beater", "pid:" + pb}, false)

	// Each capture uploaded, tagged likewise.
	ups := map[string][]string{}
	for _, u := range intake.Wait(t, 2, 60*time.Second) {
		v, _ := u.Tag("process_id")
		ups[v] = u.Tags
		if u.Profiles["profile.pprof"] == nil {
			t.Errorf("upload of pid %s: attachments %v", v, u.Event.Attachments)
		}
	}
	wantTags("bank's upload", ups[pa], []string{"service:bank", "team:payments", "dc:east", "trigger:stall"}, true)
	wantTags("plain's upload", ups[pb], []string{"dc:east", "trigger:stall"}, false)

	// bank's hooks ran for its process.
	capDir := waitEnv(t, captured, "STALLWATCH_CAPTURE_DIR")
	if !strings.HasPrefix(capDir, e.out+"/") || !strings.HasSuffix(capDir, "-"+pa+"-stall") ||
		waitEnv(t, captured, "STALLWATCH_PID") != pa || waitEnv(t, captured, "STALLWATCH_SERVICE") != "bank" {
		t.Errorf("on-capture environment:\n%s", readFile(t, captured))
	}
	if err := syscall.Kill(a.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	dsd.Collect(t, 60*time.Second, func(m []dsdtest.Message) bool {
		return slices.ContainsFunc(m, func(x dsdtest.Message) bool {
			return x.Event != nil && x.Event.AlertType == "success" && x.Event.AggregationKey == stalls[a.Pid].AggregationKey
		})
	})
	if waitEnv(t, recovered, "STALLWATCH_CAPTURE_DIR") != capDir || waitEnv(t, recovered, "STALLWATCH_EVENT") != "recover" {
		t.Errorf("on-recover environment:\n%s", readFile(t, recovered))
	}

	_ = e.sw.Cmd.Process.Signal(syscall.SIGTERM)
	if code := exitStatusOf(t, e.sw, 30*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM; log:\n%s", code, e.sw.Stderr())
	}
	if strings.Contains(e.sw.Stderr(), "uploads still queued") || len(intake.Uploads()) != 2 {
		t.Errorf("%d uploads, want 2, none left queued; log:\n%s", len(intake.Uploads()), e.sw.Stderr())
	}
}
