package watchdog

import (
	"context"
	"io"
	"net"
	"net/http"
	"time"
)

// HTTP probes a URL: a beat is a 2xx answer within Timeout. Redirects are
// not followed (a 3xx is not healthy), proxies from the environment are not
// used (a health endpoint is the target's own), and at most one probe is in
// flight.
type HTTP struct {
	URL      string
	Interval time.Duration // between probe starts; default 1s
	Timeout  time.Duration // default 2s
}

func (h *HTTP) String() string { return "http " + h.URL }

// maxBody bounds what is read of an answer: enough to let the connection
// be reused for small health answers, never a download.
const maxBody = 64 << 10

// Run implements Source.
func (h *HTTP) Run(ctx context.Context, beat func()) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.URL, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "stallwatch")
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: orDefault(h.Timeout, 2*time.Second)}).DialContext,
		MaxIdleConns:        1,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     time.Minute,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport:     tr,
		Timeout:       orDefault(h.Timeout, 2*time.Second),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	ticker := time.NewTicker(orDefault(h.Interval, time.Second))
	defer ticker.Stop()
	for {
		if probe(client, req) {
			beat()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

func probe(client *http.Client, req *http.Request) bool {
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	return err == nil && resp.StatusCode >= 200 && resp.StatusCode < 300
}
