package upload

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/intaketest"
	"github.com/stallwatch/stallwatch/internal/version"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify/datadog"
)

// writeCapture writes a capture directory as a stall's capture is
// written: a profile with one sample, a snapshot with one thread.
func writeCapture(t testing.TB, root string, pid int) string {
	t.Helper()
	start := time.Date(2026, 1, 5, 14, 30, 10, 123456789, time.UTC)
	fn := &profile.Function{ID: 1, Name: "jl_safepoint_wait", SystemName: "jl_safepoint_wait"}
	loc := &profile.Location{ID: 1, Address: 0x401000, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{
		SampleType:    []*profile.ValueType{{Type: "cpu-samples", Unit: "count"}},
		Sample:        []*profile.Sample{{Location: []*profile.Location{loc}, Value: []int64{42}, Label: map[string][]string{"thread id": {"4243"}}}},
		Location:      []*profile.Location{loc},
		Function:      []*profile.Function{fn},
		TimeNanos:     start.UnixNano(),
		DurationNanos: int64(12 * time.Second),
	}
	info := model.Info{
		Version: version.String(), Trigger: model.Stall, PID: pid,
		Command: []string{"/usr/bin/julia", "server.jl"}, Executable: "/usr/local/julia-1.11/bin/julia",
		Kernel: "6.1.0-28-amd64", Hostname: "web-1",
		Start: start, TriggerAt: start.Add(2 * time.Second), End: start.Add(12 * time.Second),
		StallFor: 10200 * time.Millisecond,
	}
	snap := &model.Snapshot{PID: pid, Time: start.Add(2 * time.Second), Threads: []model.Thread{{TID: pid, Name: "julia", State: 'S'}}}
	return intaketest.WriteCapture(t, root, info, p, snap)
}

// TestUploadForm uploads a real capture directory to a stand-in intake
// that reads the request as the intake does, and checks every field:
// headers, the parts and their order, event.json, the tags, and that each
// attachment is the capture's file, byte for byte, and a valid pprof.
func TestUploadForm(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(testing.TB) *intaketest.Server
	}{{"tcp", intaketest.Start}, {"unix socket", intaketest.StartUnix}} {
		t.Run(tc.name, func(t *testing.T) {
			intake := tc.start(t)
			dir := writeCapture(t, t.TempDir(), 4242)
			p, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			u, err := New(Config{URL: intake.URL, Tags: []string{"service:bank", "env:prod", "version:1.2.3", "host:web-1", "team:payments"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := u.Upload(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			got := intake.Wait(t, 1, 5*time.Second)[0]

			if o := got.Header.Get("DD-EVP-ORIGIN"); o != "stallwatch" {
				t.Errorf("DD-EVP-ORIGIN %q", o)
			}
			if v := got.Header.Get("DD-EVP-ORIGIN-VERSION"); v != version.String() {
				t.Errorf("DD-EVP-ORIGIN-VERSION %q", v)
			}
			wantParts := []intaketest.Part{
				{Name: "event", Filename: "event.json", ContentType: "application/json"},
				{Name: "threads.pprof", Filename: "threads.pprof", ContentType: "application/octet-stream"},
				{Name: "profile.pprof", Filename: "profile.pprof", ContentType: "application/octet-stream"},
			}
			if len(got.Parts) != len(wantParts) {
				t.Fatalf("%d parts, want %d", len(got.Parts), len(wantParts))
			}
			for i, w := range wantParts {
				g := got.Parts[i]
				if g.Name != w.Name || g.Filename != w.Filename || g.ContentType != w.ContentType {
					t.Errorf("part %d: %q %q %q, want %q %q %q", i, g.Name, g.Filename, g.ContentType, w.Name, w.Filename, w.ContentType)
				}
			}
			for name, file := range map[string]string{"profile.pprof": capdir.FileProfile, "threads.pprof": capdir.FileThreads} {
				want, err := os.ReadFile(filepath.Join(dir, file))
				if err != nil {
					t.Fatal(err)
				}
				for _, part := range got.Parts {
					if part.Name == name && !bytes.Equal(part.Data, want) {
						t.Errorf("%s is not %s as written", name, file)
					}
				}
			}
			if prof := got.Profiles["profile.pprof"]; prof == nil || len(prof.Sample) != 1 || prof.Sample[0].Value[0] != 42 {
				t.Errorf("profile.pprof does not hold the capture's sample: %v", prof)
			}
			if th := got.Profiles["threads.pprof"]; th == nil || len(th.Sample) != 1 {
				t.Errorf("threads.pprof does not hold the snapshot's thread: %v", th)
			}

			ev := got.Event
			if !slices.Equal(ev.Attachments, []string{"threads.pprof", "profile.pprof"}) {
				t.Errorf("attachments %v", ev.Attachments)
			}
			if ev.Family != "native" || ev.Version != "4" {
				t.Errorf("family %q version %q", ev.Family, ev.Version)
			}
			if !strings.Contains(string(got.Raw), `"version":"4"`) || !strings.Contains(string(got.Raw), `"endpoint_counts":null`) {
				t.Errorf("event.json: version must be the string \"4\" and endpoint_counts null: %s", got.Raw)
			}
			if ev.Start != "2026-01-05T14:30:10.123456789Z" || ev.End != "2026-01-05T14:30:22.123456789Z" {
				t.Errorf("start %q end %q", ev.Start, ev.End)
			}
			if plat, _ := ev.Info["platform"].(map[string]any); plat["hostname"] != "web-1" || plat["kernel"] != "6.1.0-28-amd64" {
				t.Errorf("info.platform %v", ev.Info["platform"])
			}
			if rt, _ := ev.Info["runtime"].(map[string]any); rt["engine"] != "julia" {
				t.Errorf("info.runtime %v", ev.Info["runtime"])
			}
			for _, want := range []string{
				"service:bank", "env:prod", "version:1.2.3", "host:web-1", "team:payments",
				"language:native", "profiler_version:" + version.String(), "process_id:4242", "pid:4242",
				"process:julia", "runtime:julia", "trigger:stall", "stall_seconds:10.2",
			} {
				if !slices.Contains(got.Tags, want) {
					t.Errorf("tags_profiler %q lacks %q", ev.TagsProfiler, want)
				}
			}
			if last := got.Tags[len(got.Tags)-1]; last != "runtime_platform:x86_64-unknown-linux-gnu" {
				t.Errorf("tags_profiler ends with %q, want runtime_platform", last)
			}
		})
	}
}

// TestStallLengthAfterRecovery: once a stall recovered, its whole length
// is the tag, not the silence at the trigger.
func TestStallLengthAfterRecovery(t *testing.T) {
	dir := writeCapture(t, t.TempDir(), 7)
	root, err := capdir.OpenRoot(filepath.Dir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := root.Update(filepath.Base(dir), func(i *model.Info) { i.StallLen = 95 * time.Second }, nil); err != nil {
		t.Fatal(err)
	}
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(p.Tags, "stall_seconds:95") {
		t.Errorf("tags %v", p.Tags)
	}
}

func TestNoThreads(t *testing.T) {
	intake := intaketest.Start(t)
	dir := writeCapture(t, t.TempDir(), 7)
	if err := os.Remove(filepath.Join(dir, capdir.FileThreads)); err != nil {
		t.Fatal(err)
	}
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := New(Config{URL: intake.URL})
	if err := u.Upload(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	got := intake.Wait(t, 1, 5*time.Second)[0]
	if !slices.Equal(got.Event.Attachments, []string{"profile.pprof"}) {
		t.Errorf("attachments %v", got.Event.Attachments)
	}
}

// TestLoadRefusesLinks: a capture's file replaced by a symbolic link is
// not followed (stallwatch reads as root and sends what it reads away).
func TestLoadRefusesLinks(t *testing.T) {
	dir := writeCapture(t, t.TempDir(), 7)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("root's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	prof := filepath.Join(dir, capdir.FileProfile)
	if err := os.Remove(prof); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, prof); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil {
		t.Fatal("Load followed a symbolic link")
	}
}

func TestRetryable(t *testing.T) {
	intake := intaketest.Start(t)
	dir := writeCapture(t, t.TempDir(), 7)
	p, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := New(Config{URL: intake.URL})
	for _, tc := range []struct {
		code  int
		retry bool
	}{{500, true}, {502, true}, {503, true}, {429, true}, {408, true}, {400, false}, {403, false}, {404, false}, {413, false}} {
		intake.Answer(tc.code)
		err := u.Upload(context.Background(), p)
		var se *StatusError
		if !errors.As(err, &se) || se.Code != tc.code {
			t.Errorf("%d: error %v", tc.code, err)
		}
		if Retryable(err) != tc.retry {
			t.Errorf("%d: Retryable %v, want %v", tc.code, Retryable(err), tc.retry)
		}
		if Unsent(err) {
			t.Errorf("%d: an answer from the agent is Unsent", tc.code)
		}
	}
	intake.Close()
	err = u.Upload(context.Background(), p)
	if err == nil || !Retryable(err) || !Unsent(err) {
		t.Errorf("agent down: %v, retryable %v, unsent %v (want both)", err, Retryable(err), Unsent(err))
	}
	if _, err := u.Request(context.Background(), &Profile{}); Retryable(err) {
		t.Errorf("an empty profile is retryable: %v", err)
	}
}

func TestTimeout(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hang })}
	ln := mustListen(t, "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Close()
	p, err := Load(writeCapture(t, t.TempDir(), 7))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := New(Config{URL: "http://" + ln.Addr().String(), Timeout: 300 * time.Millisecond})
	start := time.Now()
	err = u.Upload(context.Background(), p)
	if err == nil || !Retryable(err) {
		t.Fatalf("a hung agent: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the timeout of 300ms took %v", d)
	}
}

func TestRuntimeOf(t *testing.T) {
	for exe, want := range map[string]string{
		"/usr/local/julia-1.11.2/bin/julia": "julia", "/usr/bin/node": "node", "/usr/lib/jvm/java-17/bin/java": "jvm",
		"/usr/bin/python3.12": "python", "/usr/bin/python3": "python", "/usr/bin/dotnet": "dotnet",
		"/srv/app/server": "", "/usr/lib/erlang/erts-14/bin/beam.smp": "erlang", "/usr/bin/node (deleted)": "node",
	} {
		if got := RuntimeOf(exe, nil); got != want {
			t.Errorf("%s: %q, want %q", exe, got, want)
		}
	}
	if got := RuntimeOf("", []string{"julia", "-t", "4"}); got != "julia" {
		t.Errorf("from the command: %q", got)
	}
}

// Where a URL came from, as the start-up log line says it.
const (
	fromFlag    datadog.Source = "--upload"
	fromURL     datadog.Source = "DD_TRACE_AGENT_URL"
	fromHost    datadog.Source = "DD_AGENT_HOST"
	fromSocket  datadog.Source = "the agent's default APM socket"
	fromNowhere datadog.Source = ""
)

func TestResolveURL(t *testing.T) {
	for _, tc := range []struct {
		name   string
		flag   string
		env    map[string]string
		socket bool
		want   string
		from   datadog.Source
		bad    bool
	}{
		{name: "nothing", from: fromNowhere},
		{name: "default socket", socket: true, want: "unix://" + DefaultSocket, from: fromSocket},
		{name: "DD_AGENT_HOST alone", env: map[string]string{"DD_AGENT_HOST": "10.0.0.5"}, socket: true, want: "http://10.0.0.5:8126", from: fromHost},
		{name: "DD_AGENT_HOST with DD_TRACE_AGENT_PORT", env: map[string]string{"DD_AGENT_HOST": "agent", "DD_TRACE_AGENT_PORT": "9126"}, want: "http://agent:9126", from: fromHost},
		{name: "DD_TRACE_AGENT_URL", env: map[string]string{"DD_TRACE_AGENT_URL": "http://agent:8126/"}, want: "http://agent:8126", from: fromURL},
		{name: "DD_TRACE_AGENT_URL unix", env: map[string]string{"DD_TRACE_AGENT_URL": "unix:///run/dd/apm.socket"}, want: "unix:///run/dd/apm.socket", from: fromURL},
		{name: "DD_TRACE_AGENT_URL over DD_AGENT_HOST", env: map[string]string{"DD_TRACE_AGENT_URL": "http://a:1", "DD_AGENT_HOST": "b"}, want: "http://a:1", from: fromURL},
		{name: "flag over everything", flag: "http://127.0.0.1:18126", socket: true,
			env: map[string]string{"DD_TRACE_AGENT_URL": "http://a:1", "DD_AGENT_HOST": "b"}, want: "http://127.0.0.1:18126", from: fromFlag},
		{name: "flag with the endpoint", flag: "http://agent:8126/profiling/v1/input", want: "http://agent:8126", from: fromFlag},
		{name: "flag socket path", flag: "/run/apm.socket", want: "unix:///run/apm.socket", from: fromFlag},
		{name: "flag udp", flag: "udp://agent:8126", from: fromFlag, bad: true},
		{name: "flag no host", flag: "http:///x", from: fromFlag, bad: true},
		{name: "bad DD_TRACE_AGENT_URL", env: map[string]string{"DD_TRACE_AGENT_URL": "agent:8126"}, from: fromURL, bad: true},
		{name: "DD_TRACE_AGENT_PORT past 65535", env: map[string]string{"DD_AGENT_HOST": "agent", "DD_TRACE_AGENT_PORT": "99999"}, from: fromHost, bad: true},
		{name: "DD_TRACE_AGENT_PORT zero", env: map[string]string{"DD_AGENT_HOST": "agent", "DD_TRACE_AGENT_PORT": "0"}, from: fromHost, bad: true},
		{name: "DD_TRACE_AGENT_PORT not a number", env: map[string]string{"DD_AGENT_HOST": "agent", "DD_TRACE_AGENT_PORT": "apm"}, from: fromHost, bad: true},
		{name: "a URL's empty port", flag: "http://agent:/", from: fromFlag, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			exists := func(p string) bool { return tc.socket && p == DefaultSocket }
			got, from, err := ResolveURL(tc.flag, getenv, exists)
			if tc.bad {
				if !errors.Is(err, ErrBadURL) {
					t.Fatalf("got %q, %v; want an ErrBadURL", got, err)
				}
				return
			}
			if err != nil || got != tc.want || from != tc.from {
				t.Fatalf("got %q from %q (%v), want %q from %q", got, from, err, tc.want, tc.from)
			}
		})
	}
}

func mustListen(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
