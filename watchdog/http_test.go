package watchdog

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // "" when fine
	}{
		{"http://127.0.0.1:8080/health", ""},
		{"https://svc.internal/healthz", ""},
		{"127.0.0.1:8080/health", "not an http:// or https:// URL"},
		{"localhost/health", "not an http:// or https:// URL"},
		{"notaurl", "not an http:// or https:// URL"},
		{"ftp://host/x", "not an http:// or https:// URL"},
		{"http:///health", "has no host"},
		{"http://[::1", "is not a URL"},
	} {
		err := CheckURL(tc.url)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckURL(%q) = %v, want %q", tc.url, err, tc.want)
		}
	}
	if err := (&HTTP{URL: "notaurl"}).Run(context.Background(), func() {}); err == nil {
		t.Error("Run accepted a heartbeat that is not a URL")
	}
}

// TestHTTPProbeFailuresLogged: each kind of failure is logged with what it
// was, the first at once and then at most once per LogEvery; the return of
// answers is logged once with how many failed.
func TestHTTPProbeFailuresLogged(t *testing.T) {
	redirect := httptest.NewServer(http.RedirectHandler("/login", http.StatusFound))
	defer redirect.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer failing.Close()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)
	// A port nobody listens on: bound, then closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/health"
	ln.Close()

	// Timeouts generous enough for a loaded machine, except where the
	// timeout is what is tested.
	for _, tc := range []struct {
		name, url string
		timeout   time.Duration
		why       string
	}{
		{"5xx", failing.URL, 10 * time.Second, "500 Internal Server Error"},
		{"redirect", redirect.URL, 10 * time.Second, `302 Found to "/login" (redirects are not followed`},
		{"timeout", slow.URL, 100 * time.Millisecond, "no answer within 100ms"},
		{"refused", refused, 10 * time.Second, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &logRecorder{}
			h := &HTTP{URL: tc.url, Interval: 10 * time.Millisecond, Timeout: tc.timeout, Logger: slog.New(rec), LogEvery: time.Hour}
			runSource(t, h)
			// Wait for the first line, then for more probes to have failed.
			if err := testutil.Eventually(10*time.Second, func() bool { _, ok := rec.find("heartbeat probe failed"); return ok }); err != nil {
				t.Fatal("no log line for a failing probe")
			}
			r, _ := rec.find("heartbeat probe failed")
			if got := attr(r, "why").String(); !strings.Contains(got, tc.why) || attr(r, "url").String() != tc.url {
				t.Errorf("logged url %q why %q, want %q and %q", attr(r, "url"), got, tc.url, tc.why)
			}
		})
	}

	// Rate: many failures, one line; then answers again, one line.
	var status atomicStatus
	status.set(http.StatusServiceUnavailable)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status.get())
		status.count()
	}))
	defer flaky.Close()
	rec := &logRecorder{}
	bc := runSource(t, &HTTP{URL: flaky.URL, Interval: 5 * time.Millisecond, Timeout: 10 * time.Second, Logger: slog.New(rec), LogEvery: time.Hour})
	if err := testutil.Eventually(10*time.Second, func() bool { return status.probes() >= 20 }); err != nil {
		t.Fatal("the probes did not run")
	}
	status.set(http.StatusOK)
	bc.expectBeat(t, "a 200 after 503s", 5*time.Second)
	if err := testutil.Eventually(5*time.Second, func() bool { _, ok := rec.find("heartbeat probe answers again"); return ok }); err != nil {
		t.Fatalf("the return of answers was not logged; log:\n%s", rec.dump())
	}
	log := rec.dump()
	if n := strings.Count(log, "heartbeat probe"); n != 2 {
		t.Errorf("%d lines for a run of failures, want one when it began and one when it ended:\n%s", n, log)
	}
	r, _ := rec.find("heartbeat probe answers again")
	if n := attr(r, "failed").Int64(); n < 20 {
		t.Errorf("answers again after %d failures, want at least 20", n)
	}
}

type atomicStatus struct {
	code, n atomic.Int64
}

func (s *atomicStatus) set(c int)     { s.code.Store(int64(c)) }
func (s *atomicStatus) get() int      { return int(s.code.Load()) }
func (s *atomicStatus) count()        { s.n.Add(1) }
func (s *atomicStatus) probes() int64 { return s.n.Load() }
