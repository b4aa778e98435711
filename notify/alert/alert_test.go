package alert

import (
	"bytes"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/dsdtest"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

var baseTags = []string{"service:bank", "env:prod", "version:1.2.3", "host:web-1", "team:payments"}

// find returns the messages of one kind.
func events(msgs []dsdtest.Message) []*dsdtest.Event {
	var out []*dsdtest.Event
	for _, m := range msgs {
		if m.Event != nil {
			out = append(out, m.Event)
		}
	}
	return out
}

func checks(msgs []dsdtest.Message) []*dsdtest.ServiceCheck {
	var out []*dsdtest.ServiceCheck
	for _, m := range msgs {
		if m.Check != nil {
			out = append(out, m.Check)
		}
	}
	return out
}

func metric(msgs []dsdtest.Message, name string) *dsdtest.Metric {
	for _, m := range msgs {
		if m.Metric != nil && m.Metric.Name == name {
			return m.Metric
		}
	}
	return nil
}

// count is how many messages there are.
func count(n int) func([]dsdtest.Message) bool {
	return func(m []dsdtest.Message) bool { return len(m) >= n }
}

func requireTags(t *testing.T, what string, tags []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(tags, w) {
			t.Errorf("%s: tags %v lack %q", what, tags, w)
		}
	}
}

// TestStallCaptureRecovery sends the alerts of one stall through a real
// UDP socket and a real unix datagram socket and checks every datagram
// against the DogStatsD format: the stall's error event, service check
// and gauge; the capture's counts and event in the same thread; the
// recovery's success event, service check, gauge and duration.
func TestStallCaptureRecovery(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen func(testing.TB) *dsdtest.Server
	}{{"udp", dsdtest.ListenUDP}, {"unixgram", dsdtest.ListenUnixgram}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.listen(t)
			var logs bytes.Buffer
			c, err := New(Config{Addr: srv.Addr, Tags: baseTags, Hostname: "web-1", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if !c.Enabled() {
				t.Fatal("client with an address is not enabled")
			}
			tg := Target{PID: 4242, Process: "bank", Name: "bank"}
			stall := Stall{Start: time.Unix(1_700_000_000, 0), For: 10200 * time.Millisecond,
				Source: "file /run/bank.beat", Reason: "no heartbeat from file /run/bank.beat for 10.2s"}
			wantTags := append(slices.Clone(baseTags), "pid:4242", "process:bank")

			c.Stalled(tg, stall)
			msgs := srv.Collect(t, 5*time.Second, count(3))
			ev := events(msgs)
			if len(ev) != 1 {
				t.Fatalf("stall: %d events, want 1: %+v", len(ev), msgs)
			}
			e := ev[0]
			if e.AlertType != "error" || e.Priority != "normal" || e.SourceType != "stallwatch" || e.Hostname != "web-1" {
				t.Errorf("stall event fields: %+v", e)
			}
			if !strings.Contains(e.Title, "bank") || !strings.Contains(e.Title, "4242") || !strings.Contains(e.Title, "10.2s") {
				t.Errorf("stall title %q does not name the service, pid and stall length", e.Title)
			}
			if !strings.Contains(e.Text, "file /run/bank.beat") || !strings.Contains(e.Text, "\n") {
				t.Errorf("stall text %q", e.Text)
			}
			if e.AggregationKey == "" || time.Since(time.Unix(e.Timestamp, 0)) > time.Minute {
				t.Errorf("stall event key %q, timestamp %d", e.AggregationKey, e.Timestamp)
			}
			requireTags(t, "stall event", e.Tags, append(wantTags, "trigger:stall")...)
			sc := checks(msgs)
			if len(sc) != 1 || sc[0].Name != CheckResponsive || sc[0].Status != 2 || sc[0].Hostname != "web-1" {
				t.Fatalf("stall service check: %+v", sc)
			}
			requireTags(t, "stall service check", sc[0].Tags, wantTags...)
			if g := metric(msgs, MetricStallActive); g == nil || g.Type != "g" || g.Value != 1 {
				t.Errorf("stall.active: %+v", g)
			} else {
				requireTags(t, "stall.active", g.Tags, wantTags...)
			}

			cp := Capture{Dir: "/var/lib/stallwatch/20260105T143012.345Z-4242-stall", Trigger: "stall", Stall: &stall,
				Findings: []string{"DEADLOCK: tid 11 waits for tid 12 waits for tid 11."}, Samples: 3038, Lost: 7}
			c.Captured(tg, cp)
			msgs = srv.Collect(t, 5*time.Second, count(3))
			if n := metric(msgs, MetricCaptures); n == nil || n.Type != "c" || n.Value != 1 {
				t.Errorf("captures: %+v", n)
			} else {
				requireTags(t, "captures", n.Tags, append(wantTags, "trigger:stall")...)
			}
			if n := metric(msgs, MetricSamplesLost); n == nil || n.Type != "c" || n.Value != 7 {
				t.Errorf("samples.lost: %+v", n)
			}
			ev = events(msgs)
			if len(ev) != 1 || ev[0].AggregationKey != e.AggregationKey || ev[0].AlertType != "error" {
				t.Fatalf("capture event not in the stall's thread: %+v", ev)
			}
			if !strings.Contains(ev[0].Text, cp.Dir) || !strings.Contains(ev[0].Text, "DEADLOCK: tid 11") {
				t.Errorf("capture event text lacks the findings or the directory: %q", ev[0].Text)
			}

			c.Recovered(tg, stall, 42*time.Second, []string{cp.Dir})
			msgs = srv.Collect(t, 5*time.Second, count(4))
			ev = events(msgs)
			if len(ev) != 1 || ev[0].AlertType != "success" || ev[0].AggregationKey != e.AggregationKey {
				t.Fatalf("recovery event does not close the stall's thread: %+v", ev)
			}
			if !strings.Contains(ev[0].Title, "42s") {
				t.Errorf("recovery title %q lacks the stall's length", ev[0].Title)
			}
			sc = checks(msgs)
			if len(sc) != 1 || sc[0].Status != 0 {
				t.Errorf("recovery service check: %+v", sc)
			}
			if g := metric(msgs, MetricStallActive); g == nil || g.Value != 0 {
				t.Errorf("stall.active after recovery: %+v", g)
			}
			if d := metric(msgs, MetricStallLength); d == nil || d.Type != "d" || d.Value != 42 {
				t.Errorf("stall.duration: %+v", d)
			} else {
				requireTags(t, "stall.duration", d.Tags, wantTags...)
			}
			if logs.Len() > 0 {
				t.Errorf("a reachable agent gave log lines: %s", logs.String())
			}
		})
	}
}

func TestHeartbeat(t *testing.T) {
	srv := dsdtest.ListenUDP(t)
	c, err := New(Config{Addr: srv.Addr, Tags: baseTags, Hostname: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg := Target{PID: 7, Process: "julia"}
	c.Heartbeat(tg, 1500*time.Millisecond, false)
	msgs := srv.Collect(t, 5*time.Second, count(3))
	if g := metric(msgs, MetricHeartbeatAge); g == nil || g.Type != "g" || g.Value != 1.5 {
		t.Errorf("heartbeat.age: %+v", g)
	}
	if sc := checks(msgs); len(sc) != 1 || sc[0].Status != 0 {
		t.Errorf("service check while healthy: %+v", sc)
	}
	c.Heartbeat(tg, 31*time.Second, true)
	msgs = srv.Collect(t, 5*time.Second, count(3))
	if sc := checks(msgs); len(sc) != 1 || sc[0].Status != 2 || !strings.Contains(sc[0].Message, "31s") {
		t.Errorf("service check while stalled: %+v", sc)
	}
	if g := metric(msgs, MetricStallActive); g == nil || g.Value != 1 {
		t.Errorf("stall.active while stalled: %+v", g)
	}
}

// TestTargetControlledNames: a process name is the target's choice; the
// separators of the format in it must not break the datagram.
func TestTargetControlledNames(t *testing.T) {
	srv := dsdtest.ListenUDP(t)
	c, err := New(Config{Addr: srv.Addr, Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg := Target{PID: 9, Process: "evil,tag:x|#y\nz:1|c"}
	c.Stalled(tg, Stall{Start: time.Now(), For: time.Second})
	msgs := srv.Collect(t, 5*time.Second, count(3))
	for _, m := range msgs {
		if m.Metric != nil && m.Metric.Name != MetricStallActive {
			t.Errorf("a metric line was injected: %+v", m.Metric)
		}
	}
	e := events(msgs)[0]
	if strings.Contains(e.Title, "\n") {
		t.Errorf("title has a newline: %q", e.Title)
	}
	if v, _ := dsdtest.Tag(e.Tags, "process"); v != "evil_tag:x__y_z:1_c" {
		t.Errorf("process tag %q", v)
	}
}

// TestUnreachable: an agent configured but not there gives one warning,
// however many alerts fail, and no call waits for it.
func TestUnreachable(t *testing.T) {
	t.Run("udp", func(t *testing.T) {
		srv := dsdtest.ListenUDP(t)
		srv.Close() // the port answers ICMP "port unreachable" from now on
		var logs testutil.Buffer
		c, err := New(Config{Addr: srv.Addr, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		for i := 0; i < 20; i++ {
			c.Stalled(Target{PID: 1}, Stall{Start: time.Now(), For: time.Second})
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("20 alerts to a closed port took %v", d)
		}
		if c.Failed() == 0 {
			t.Fatal("writes to a closed UDP port were not counted as failed")
		}
		if n := strings.Count(logs.String(), "DogStatsD alerts cannot be sent"); n != 1 {
			t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
		}
	})
	t.Run("unixgram", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "absent.socket")
		var logs testutil.Buffer
		c, err := New(Config{Addr: "unixgram://" + path, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i := 0; i < 5; i++ {
			c.Stalled(Target{PID: 1}, Stall{Start: time.Now(), For: time.Second})
		}
		out := logs.String()
		if n := strings.Count(out, "DogStatsD alerts cannot be sent"); n != 1 || !strings.Contains(out, path) {
			t.Errorf("%d warnings, want 1 naming the socket:\n%s", n, out)
		}
		// The agent comes up: alerts arrive without a restart.
		conn, err := net.ListenPacket("unixgram", path)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		c.Stalled(Target{PID: 1}, Stall{Start: time.Now(), For: time.Second})
		buf := make([]byte, 8192)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := conn.ReadFrom(buf)
		if err != nil {
			t.Fatalf("no alert once the socket exists: %v", err)
		}
		if _, err := dsdtest.Parse(buf[:n]); err != nil {
			t.Fatal(err)
		}
	})
}

// TestNotConfigured: no address, nothing sent and nothing said.
func TestNotConfigured(t *testing.T) {
	var logs bytes.Buffer
	c, err := New(Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	c.Stalled(Target{PID: 1}, Stall{})
	c.Captured(Target{PID: 1}, Capture{})
	c.Recovered(Target{PID: 1}, Stall{}, time.Second, nil)
	c.Heartbeat(Target{PID: 1}, time.Second, false)
	c.Exited(Target{PID: 1}, nil)
	if err := c.Close(); err != nil || c.Enabled() || logs.Len() > 0 {
		t.Errorf("unconfigured client: enabled %v, close %v, logs %q", c.Enabled(), err, logs.String())
	}
}

func TestLongFindingsFitOneDatagram(t *testing.T) {
	srv := dsdtest.ListenUDP(t)
	c, err := New(Config{Addr: srv.Addr, Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var findings []string
	for i := 0; i < 200; i++ {
		findings = append(findings, strings.Repeat("é", 40))
	}
	c.Captured(Target{PID: 1}, Capture{Dir: "/x", Trigger: "signal", Findings: findings})
	msgs := srv.Collect(t, 5*time.Second, count(3))
	e := events(msgs)
	if len(e) != 1 || len(e[0].Text) > maxText || !strings.HasSuffix(e[0].Text, "…") {
		t.Fatalf("long text not clipped to one datagram: %d events", len(e))
	}
	if c.Failed() != 0 {
		t.Errorf("%d writes failed", c.Failed())
	}
}
