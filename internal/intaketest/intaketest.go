// Package intaketest is a stand-in for the Datadog agent's profiling
// intake (POST /profiling/v1/input), for tests: a real HTTP server, on TCP
// or a unix socket, that reads each request the way the intake does —
// multipart/form-data, the "event" part as JSON, every attachment the
// event lists present as a part of that name — and keeps what it got.
// The real backend cannot be reached from here; this checks the form
// libdatadog's exporter writes (see the upload package).
package intaketest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// Event is event.json as the intake reads it.
type Event struct {
	Attachments    []string        `json:"attachments"`
	TagsProfiler   string          `json:"tags_profiler"`
	Start          string          `json:"start"`
	End            string          `json:"end"`
	Family         string          `json:"family"`
	Version        string          `json:"version"`
	EndpointCounts json.RawMessage `json:"endpoint_counts"`
	Internal       map[string]any  `json:"internal"`
	Info           map[string]any  `json:"info"`
}

// Part is one part of the form.
type Part struct {
	Name, Filename, ContentType string
	Data                        []byte
}

// Upload is one request the intake accepted.
type Upload struct {
	Header   http.Header
	Event    Event
	Raw      []byte // event.json as sent
	Parts    []Part // in order, the event included
	Profiles map[string]*profile.Profile
	Tags     []string // tags_profiler, split
	At       time.Time
}

// Tag returns the value of the first tag key:value.
func (u *Upload) Tag(key string) (string, bool) {
	for _, t := range u.Tags {
		if v, ok := strings.CutPrefix(t, key+":"); ok {
			return v, true
		}
	}
	return "", false
}

// Server is the stand-in intake.
type Server struct {
	// URL is the agent's base URL: "http://127.0.0.1:port" or
	// "unix:///path".
	URL string

	srv    *http.Server
	ln     net.Listener
	status atomic.Int32 // answer to give; 0: 200
	mu     sync.Mutex
	got    []*Upload
	tries  []*Upload
	decide func(*Upload) (int, time.Duration)
	bad    []error
	notify chan struct{}
}

// Start serves on a loopback TCP port.
func Start(t testing.TB) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, ln, "http://"+ln.Addr().String())
}

// StartAt serves on addr ("127.0.0.1:port"), as an agent that comes up
// where stallwatch already points.
func StartAt(t testing.TB, addr string) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, ln, "http://"+ln.Addr().String())
}

// StartUnix serves on a unix socket, as the agent's apm.socket.
func StartUnix(t testing.TB) *Server {
	t.Helper()
	path := filepath.Join(t.TempDir(), "apm.socket")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, ln, "unix://"+path)
}

func serve(t testing.TB, ln net.Listener, url string) *Server {
	s := &Server{URL: url, ln: ln, notify: make(chan struct{}, 1)}
	mux := http.NewServeMux()
	mux.HandleFunc("/profiling/v1/input", s.handle)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	t.Cleanup(s.Close)
	return s
}

// Close stops the server.
func (s *Server) Close() {
	s.srv.Close()
	s.ln.Close() // Serve may not have taken it yet
}

// Answer makes the server answer code to every request from now on
// (0: accept).
func (s *Server) Answer(code int) { s.status.Store(int32(code)) }

// Decide makes the server answer each well-formed request as f says: a
// status (0: accept) after a delay (an agent that fails one profile, or
// answers late). nil: accept at once.
func (s *Server) Decide(f func(*Upload) (code int, delay time.Duration)) {
	s.mu.Lock()
	s.decide = f
	s.mu.Unlock()
}

// Tries returns every well-formed request received so far, accepted or
// not.
func (s *Server) Tries() []*Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Upload(nil), s.tries...)
}

// Uploads returns what was accepted so far.
func (s *Server) Uploads() []*Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Upload(nil), s.got...)
}

// Errors returns why requests were malformed.
func (s *Server) Errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.bad...)
}

// Wait waits until n uploads were accepted, failing the test at timeout
// or at a malformed request.
func (s *Server) Wait(t testing.TB, n int, timeout time.Duration) []*Upload {
	t.Helper()
	deadline := time.After(timeout)
	for {
		if errs := s.Errors(); len(errs) > 0 {
			t.Fatalf("the intake got a malformed request: %v", errs[0])
		}
		if got := s.Uploads(); len(got) >= n {
			return got
		}
		select {
		case <-s.notify:
		case <-deadline:
			t.Fatalf("%d uploads within %v, want %d", len(s.Uploads()), timeout, n)
		}
	}
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if code := s.status.Load(); code != 0 {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, "stand-in intake told to refuse", int(code))
		return
	}
	u, err := Read(r)
	s.mu.Lock()
	decide := s.decide
	if err == nil {
		s.tries = append(s.tries, u)
	}
	s.mu.Unlock()
	code := 0
	if err == nil && decide != nil {
		var delay time.Duration
		code, delay = decide(u)
		select {
		case <-time.After(delay):
		case <-r.Context().Done(): // the client gave up; the agent has it all the same
		}
	}
	s.mu.Lock()
	switch {
	case err != nil:
		s.bad = append(s.bad, err)
	case code == 0 || code/100 == 2:
		s.got = append(s.got, u)
	}
	s.mu.Unlock()
	if err == nil && code != 0 && code/100 != 2 {
		http.Error(w, "stand-in intake told to refuse this one", code)
		return
	}
	select {
	case s.notify <- struct{}{}:
	default:
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// Read parses a request as the intake does, strictly.
func Read(r *http.Request) (*Upload, error) {
	if r.Method != http.MethodPost {
		return nil, fmt.Errorf("method %s", r.Method)
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, fmt.Errorf("content type %q is not multipart/form-data with a boundary", r.Header.Get("Content-Type"))
	}
	u := &Upload{Header: r.Header.Clone(), Profiles: map[string]*profile.Profile{}, At: time.Now()}
	mr := multipart.NewReader(io.LimitReader(r.Body, 512<<20), params["boundary"])
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("multipart: %w", err)
		}
		data, err := io.ReadAll(p)
		if err != nil {
			return nil, fmt.Errorf("part %q: %w", p.FormName(), err)
		}
		u.Parts = append(u.Parts, Part{Name: p.FormName(), Filename: p.FileName(), ContentType: p.Header.Get("Content-Type"), Data: data})
	}
	if len(u.Parts) == 0 || u.Parts[0].Name != "event" {
		return nil, fmt.Errorf("the first part is not \"event\"")
	}
	u.Raw = u.Parts[0].Data
	dec := json.NewDecoder(bytes.NewReader(u.Raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u.Event); err != nil {
		return nil, fmt.Errorf("event.json: %w", err)
	}
	if u.Event.TagsProfiler != "" {
		u.Tags = strings.Split(u.Event.TagsProfiler, ",")
	}
	for _, name := range u.Event.Attachments {
		var part *Part
		for i := range u.Parts {
			if u.Parts[i].Name == name {
				part = &u.Parts[i]
			}
		}
		if part == nil {
			return nil, fmt.Errorf("attachment %q is listed but not sent", name)
		}
		if strings.HasSuffix(name, ".pprof") {
			prof, err := profile.ParseData(part.Data)
			if err != nil {
				return nil, fmt.Errorf("attachment %q is not a pprof: %w", name, err)
			}
			u.Profiles[name] = prof
		}
	}
	if len(u.Parts) != len(u.Event.Attachments)+1 {
		return nil, fmt.Errorf("%d parts for %d attachments", len(u.Parts), len(u.Event.Attachments))
	}
	return u, nil
}
