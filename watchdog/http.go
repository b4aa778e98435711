package watchdog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// HTTP probes a URL: a beat is a 2xx answer within Timeout. Redirects are
// not followed (a 3xx is not healthy), proxies from the environment are not
// used (a health endpoint is the target's own), and at most one probe is in
// flight.
//
// A failed probe is not a beat, and is logged: the first of a run of
// failures at once, then at most one line per LogEvery with how many
// failed meanwhile and the latest reason, and one line when probes succeed
// again. A 500 at every probe during an hour-long stall is 60 lines, not
// 3,600.
type HTTP struct {
	URL      string
	Interval time.Duration // between probe starts; default 1s
	Timeout  time.Duration // default 2s
	Logger   *slog.Logger  // default: no log
	LogEvery time.Duration // default 1m
}

func (h *HTTP) String() string { return "http " + h.URL }

// CheckURL reports whether rawURL can be probed: an absolute http or https
// URL with a host. Commands check it when they start, so that a mistyped
// heartbeat is refused instead of failing at every probe.
func CheckURL(rawURL string) error {
	if !strings.Contains(rawURL, "://") {
		return fmt.Errorf("%q is not an http:// or https:// URL (write it whole: http://%s)", rawURL, rawURL)
	}
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL: %w", rawURL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q is not an http:// or https:// URL", rawURL)
	case u.Host == "":
		return fmt.Errorf("%q has no host", rawURL)
	}
	return nil
}

// maxBody bounds what is read of an answer: enough to let the connection
// be reused for small health answers, never a download.
const maxBody = 64 << 10

// Run implements Source.
func (h *HTTP) Run(ctx context.Context, beat func()) error {
	if err := CheckURL(h.URL); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "stallwatch")
	timeout := orDefault(h.Timeout, 2*time.Second)
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
		MaxIdleConns:        1,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     time.Minute,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	fl := failureLog{log: h.Logger, every: orDefault(h.LogEvery, time.Minute), url: h.URL}
	ticker := time.NewTicker(orDefault(h.Interval, time.Second))
	defer ticker.Stop()
	for {
		why := probe(client, req, timeout)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if why == "" {
			fl.ok()
			beat()
		} else {
			fl.failed(why)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// probe asks once; it returns why the answer is not a beat, or "".
func probe(client *http.Client, req *http.Request, timeout time.Duration) string {
	resp, err := client.Do(req)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Sprintf("no answer within %v", timeout)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in every line already
		}
		return err.Error()
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Sprintf("%s to %q (redirects are not followed: probe the final URL)", resp.Status, resp.Header.Get("Location"))
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		return resp.Status
	case err != nil:
		return fmt.Sprintf("%s, but reading the answer failed: %v", resp.Status, err)
	}
	return ""
}

// failureLog rate-limits the log lines of failing probes.
type failureLog struct {
	log   *slog.Logger
	every time.Duration
	url   string
	count int       // failures since the last line
	total int       // failures in this run of them
	start time.Time // of this run
	last  time.Time // of the last line
}

func (f *failureLog) failed(why string) {
	now := time.Now()
	if f.total == 0 {
		f.start = now
	}
	f.total++
	f.count++
	if f.log == nil || (f.total > 1 && now.Sub(f.last) < f.every) {
		return
	}
	if f.total == 1 {
		f.log.Warn("heartbeat probe failed", "url", f.url, "why", why)
	} else {
		f.log.Warn("heartbeat probes still failing", "url", f.url, "why", why, "failed", f.count, "failing_for", now.Sub(f.start).Round(time.Second))
	}
	f.count, f.last = 0, now
}

func (f *failureLog) ok() {
	if f.total > 0 && f.log != nil {
		f.log.Info("heartbeat probe answers again", "url", f.url, "failed", f.total, "failing_for", time.Since(f.start).Round(time.Millisecond))
	}
	f.total, f.count = 0, 0
}
