package upload

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/stallwatch/stallwatch/notify/datadog"
)

// Path is the trace agent's profiling endpoint.
const Path = "/profiling/v1/input"

// DefaultSocket is where the Datadog agent serves APM (and profiles) on a
// unix socket by default.
const DefaultSocket = "/var/run/datadog/apm.socket"

// DefaultPort is the trace agent's TCP port.
const DefaultPort = "8126"

// Agent is the trace agent as Datadog's libraries find it.
var Agent = datadog.Service{
	Flag: "--upload", URLVar: "DD_TRACE_AGENT_URL", PortVar: "DD_TRACE_AGENT_PORT", Port: DefaultPort,
	Socket: DefaultSocket, SocketName: "the agent's default APM socket",
	HostPort: func(hp string) string { return "http://" + hp }, Parse: ParseURL,
}

// ErrBadURL is wrapped by the errors of URLs that cannot be used.
var ErrBadURL = errors.New("not a trace agent URL")

// ResolveURL returns the trace agent's base URL ("http://host:port",
// "https://…" or "unix:///path") and where it came from: flag, else
// DD_TRACE_AGENT_URL, else http://DD_AGENT_HOST:8126 (DD_TRACE_AGENT_PORT),
// else DefaultSocket if it exists. An empty URL with no error means none
// is configured. exists may be nil (os.Stat is used).
func ResolveURL(flag string, getenv func(string) string, exists func(string) bool) (string, datadog.Source, error) {
	return Agent.Resolve(flag, getenv, exists)
}

// ParseURL checks a trace agent URL and returns its base: "http://host:port"
// (a trailing /profiling/v1/input is taken off: the endpoint is added when
// sending), or "unix:///path" for a socket ("/path" alone is one too).
func ParseURL(s string) (string, error) {
	if strings.HasPrefix(s, "/") {
		s = "unix://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%q: %w: %v", s, ErrBadURL, err)
	}
	switch u.Scheme {
	case "unix":
		if u.Host != "" || u.Path == "" || u.RawQuery != "" || u.Fragment != "" || !plainPath(u.Path) {
			return "", fmt.Errorf("%q: %w (want unix:///path/to/apm.socket)", s, ErrBadURL)
		}
		return "unix://" + u.Path, nil
	case "http", "https":
		if u.Host == "" {
			return "", fmt.Errorf("%q: %w: no host", s, ErrBadURL)
		}
		if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return "", fmt.Errorf("%q: %w: a query, fragment or user is not expected", s, ErrBadURL)
		}
		if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
			if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
				return "", fmt.Errorf("%q: %w: port %q (1 to 65535)", s, ErrBadURL, p)
			}
		}
		path := strings.TrimSuffix(strings.TrimSuffix(u.EscapedPath(), "/"), Path)
		return u.Scheme + "://" + u.Host + strings.TrimSuffix(path, "/"), nil
	}
	return "", fmt.Errorf("%q: %w (want http://host:8126 or unix:///path)", s, ErrBadURL)
}

// plainPath accepts a socket path that needs no escaping in a URL and
// fits a sockaddr_un.
func plainPath(p string) bool {
	if len(p) >= 108 {
		return false
	}
	for _, r := range p {
		if r <= ' ' || r == 0x7f || r == '%' || r == '?' || r == '#' || r >= 0x80 {
			return false
		}
	}
	return true
}
