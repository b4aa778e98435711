package upload

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stallwatch/stallwatch/internal/version"
)

// The names of the form, as libdatadog's exporter writes them.
const (
	PartEvent     = "event"
	FileEvent     = "event.json"
	AttachProfile = "profile.pprof" // the capture's profile.pb.gz
	AttachThreads = "threads.pprof" // the capture's threads.pb.gz
	Family        = "native"
	EventVersion  = "4"
	Origin        = "stallwatch"
)

// DefaultTimeout bounds one request: a 5 MB capture over a slow link
// still fits, a hung agent does not hold the queue for long.
const DefaultTimeout = 30 * time.Second

// Config configures an Uploader.
type Config struct {
	// URL is the trace agent's base URL, as ResolveURL returns it.
	URL string
	// Tags go on every upload: service, env, version, host and the
	// user's own.
	Tags    []string
	Timeout time.Duration // per request; default DefaultTimeout
	Logger  *slog.Logger
}

// Uploader sends profiles to one agent.
type Uploader struct {
	cfg      Config
	endpoint string
	client   *http.Client
}

// New returns an Uploader for cfg.URL.
func New(cfg Config) (*Uploader, error) {
	base, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the agent is local; an HTTP_PROXY meant for the Internet must not catch it
	u := &Uploader{cfg: cfg, client: &http.Client{Transport: tr, Timeout: cfg.Timeout}}
	if sock, ok := strings.CutPrefix(base, "unix://"); ok {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		u.endpoint = "http://localhost" + Path
	} else {
		u.endpoint = base + Path
	}
	// Redirects would resend a body we no longer hold; the agent never
	// redirects.
	u.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return u, nil
}

// Endpoint is where Upload posts (for a socket, the URL inside it).
func (u *Uploader) Endpoint() string { return u.endpoint }

// URL is the agent's address as configured.
func (u *Uploader) URL() string { return u.cfg.URL }

// Profile is what one upload carries.
type Profile struct {
	Start, End time.Time
	Profile    []byte // a pprof, gzipped (profile.pb.gz)
	Threads    []byte // a second pprof (threads.pb.gz); may be nil
	// Tags are this profile's, after the Uploader's.
	Tags []string
	// Hostname and Kernel fill event.json's info.platform.
	Hostname, Kernel string
	Runtime          string // julia, node, jvm …; "" when unknown
}

// StatusError is an answer other than 2xx.
type StatusError struct {
	Code int
	Body string // the start of the answer's body
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("the agent answered %d %s", e.Code, http.StatusText(e.Code))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Retryable says whether a failed Upload may succeed if tried again: the
// agent was down, slow, overloaded or failing (network errors, timeouts,
// 408, 429, 5xx). Any other answer refuses this profile for good.
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code == http.StatusRequestTimeout || se.Code == http.StatusTooManyRequests || se.Code >= 500
	}
	var be *buildError
	return !errors.As(err, &be)
}

// NoAnswerError is an upload sent whole that the agent did not answer
// within the timeout: it may have taken it (an agent answering late, not
// one that is down). Sending it again could give it twice.
type NoAnswerError struct {
	Timeout time.Duration
	Err     error
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("sent, no answer within %v: %v", e.Timeout, e.Err)
}
func (e *NoAnswerError) Unwrap() error { return e.Err }

// Unanswered says whether err is a NoAnswerError: the profile may have
// arrived, and is not to be sent again.
func Unanswered(err error) bool {
	var na *NoAnswerError
	return errors.As(err, &na)
}

// UnsentError is an upload that never reached the agent whole: it could
// not be dialled, or the connection failed before the request was
// written. The failure is the agent's, not the profile's.
type UnsentError struct{ Err error }

func (e *UnsentError) Error() string { return e.Err.Error() }
func (e *UnsentError) Unwrap() error { return e.Err }

// Unsent says whether err is an UnsentError: the agent is down or
// unreachable, whatever the profile.
func Unsent(err error) bool {
	var u *UnsentError
	return errors.As(err, &u)
}

// buildError is a request that could not be made: retrying cannot help.
type buildError struct{ err error }

func (e *buildError) Error() string { return e.err.Error() }
func (e *buildError) Unwrap() error { return e.err }

// Upload posts p. It returns nil when the agent took it (2xx).
func (u *Uploader) Upload(ctx context.Context, p *Profile) error {
	req, err := u.Request(ctx, p)
	if err != nil {
		return err
	}
	// Whether the whole request went out: a timeout after it is not a
	// failure to send but an agent that did not answer in time, and may
	// have the profile.
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) { wrote.Store(i.Err == nil) },
	}))
	resp, err := u.client.Do(req)
	if err != nil {
		var ne net.Error
		switch {
		case !wrote.Load():
			err = &UnsentError{Err: err}
		case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
			err = &NoAnswerError{Timeout: u.cfg.Timeout, Err: err}
		}
		return fmt.Errorf("upload to %s: %w", u.cfg.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("upload to %s: %w", u.cfg.URL, &StatusError{Code: resp.StatusCode, Body: printable(body)})
	}
	return nil
}

// Request builds the HTTP request Upload sends.
func (u *Uploader) Request(ctx context.Context, p *Profile) (*http.Request, error) {
	if len(p.Profile) == 0 {
		return nil, &buildError{errors.New("upload: no profile")}
	}
	body, ctype, err := u.body(p)
	if err != nil {
		return nil, &buildError{fmt.Errorf("upload: %w", err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, &buildError{fmt.Errorf("upload: %w", err)}
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("DD-EVP-ORIGIN", Origin)
	req.Header.Set("DD-EVP-ORIGIN-VERSION", version.String())
	req.Header.Set("User-Agent", Origin+"/"+version.String())
	// libdatadog closes each connection too: the agent's idle timeout
	// otherwise breaks the next request's pipe.
	req.Close = true
	return req, nil
}

// event is event.json.
type event struct {
	Attachments    []string          `json:"attachments"`
	TagsProfiler   string            `json:"tags_profiler"`
	Start          string            `json:"start"`
	End            string            `json:"end"`
	Family         string            `json:"family"`
	Version        string            `json:"version"`
	EndpointCounts any               `json:"endpoint_counts"`
	Internal       map[string]string `json:"internal"`
	Info           info              `json:"info"`
}

type info struct {
	Platform *platform   `json:"platform,omitempty"`
	Runtime  *runtimeInf `json:"runtime,omitempty"`
	Profiler profiler    `json:"profiler"`
}

type platform struct {
	Hostname string `json:"hostname,omitempty"`
	Kernel   string `json:"kernel,omitempty"`
}

type runtimeInf struct {
	Engine string `json:"engine"`
}

type profiler struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// timeLayout is libdatadog's: UTC with nine fractional digits.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func (u *Uploader) body(p *Profile) ([]byte, string, error) {
	ev := event{
		TagsProfiler: u.tagsProfiler(p.Tags),
		Start:        p.Start.UTC().Format(timeLayout),
		End:          p.End.UTC().Format(timeLayout),
		Family:       Family,
		Version:      EventVersion,
		Internal:     map[string]string{"stallwatch_version": version.String()},
		Info:         info{Profiler: profiler{Name: Origin, Version: version.String()}},
	}
	if p.Hostname != "" || p.Kernel != "" {
		ev.Info.Platform = &platform{Hostname: p.Hostname, Kernel: p.Kernel}
	}
	if p.Runtime != "" {
		ev.Info.Runtime = &runtimeInf{Engine: p.Runtime}
	}
	if p.Threads != nil {
		ev.Attachments = append(ev.Attachments, AttachThreads)
	}
	ev.Attachments = append(ev.Attachments, AttachProfile)
	evJSON, err := json.Marshal(ev)
	if err != nil {
		return nil, "", err
	}

	var buf bytes.Buffer
	buf.Grow(len(evJSON) + len(p.Profile) + len(p.Threads) + 1024)
	mw := multipart.NewWriter(&buf)
	if err := writePart(mw, PartEvent, FileEvent, "application/json", evJSON); err != nil {
		return nil, "", err
	}
	if p.Threads != nil {
		if err := writePart(mw, AttachThreads, AttachThreads, "application/octet-stream", p.Threads); err != nil {
			return nil, "", err
		}
	}
	if err := writePart(mw, AttachProfile, AttachProfile, "application/octet-stream", p.Profile); err != nil {
		return nil, "", err
	}
	if err := mw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), mw.FormDataContentType(), nil
}

func writePart(mw *multipart.Writer, name, filename, ctype string, data []byte) error {
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, name, filename))
	h.Set("Content-Type", ctype)
	w, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// tagsProfiler joins the Uploader's tags and extra, ending, as libdatadog
// does, with runtime_platform.
func (u *Uploader) tagsProfiler(extra []string) string {
	tags := make([]string, 0, len(u.cfg.Tags)+len(extra)+1)
	for _, t := range append(append([]string(nil), u.cfg.Tags...), extra...) {
		if t = cleanTag(t); t != "" {
			tags = append(tags, t)
		}
	}
	tags = append(tags, "runtime_platform:"+targetTriple())
	return strings.Join(tags, ",")
}

// cleanTag keeps a tag from breaking the comma-separated list.
func cleanTag(t string) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if r == ',' || r < ' ' || r == 0x7f {
			return '_'
		}
		return r
	}, t))
}

// targetTriple names this platform as Rust's target triples do, as
// libdatadog's runtime_platform tag has it.
func targetTriple() string {
	arch := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "386": "i686"}[runtime.GOARCH]
	if arch == "" {
		arch = runtime.GOARCH
	}
	return arch + "-unknown-" + runtime.GOOS + "-gnu"
}

func printable(b []byte) string {
	s := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, string(bytes.ToValidUTF8(b, []byte("?"))))
	return strings.TrimSpace(s)
}
