package alert

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/stallwatch/stallwatch/notify/datadog"
)

// DefaultSocket is where the Datadog agent listens for DogStatsD on a unix
// datagram socket by default.
const DefaultSocket = "/var/run/datadog/dsd.socket"

// DefaultPort is DogStatsD's UDP port.
const DefaultPort = "8125"

// Agent is DogStatsD as Datadog's libraries find it.
var Agent = datadog.Service{
	Flag: "--statsd", URLVar: "DD_DOGSTATSD_URL", PortVar: "DD_DOGSTATSD_PORT", Port: DefaultPort,
	Socket: DefaultSocket, SocketName: "the agent's default socket", Parse: ParseAddr,
}

// ErrBadAddr is wrapped by the errors of addresses that cannot be used.
var ErrBadAddr = errors.New("not a DogStatsD address")

// ResolveAddr returns the DogStatsD address to send alerts to, in the form
// datadog-go takes ("host:port", "unix:///path" or "unixgram:///path"), and
// where it came from: flag, else DD_DOGSTATSD_URL, else DD_AGENT_HOST (with
// DD_DOGSTATSD_PORT, default 8125), else DefaultSocket if it exists. An
// empty address with no error means none is configured. exists may be nil
// (os.Stat is used).
func ResolveAddr(flag string, getenv func(string) string, exists func(string) bool) (string, datadog.Source, error) {
	return Agent.Resolve(flag, getenv, exists)
}

// ParseAddr turns an address a user writes into datadog-go's form:
// "udp://host:port", "host:port" and ":port" (loopback) are UDP;
// "unix:///path", "unixgram:///path" and "/path" are a unix socket.
func ParseAddr(s string) (string, error) {
	switch {
	case strings.HasPrefix(s, "/"):
		if !validPath(s) {
			return "", fmt.Errorf("%q: %w: not a socket path", s, ErrBadAddr)
		}
		return "unix://" + s, nil
	case strings.HasPrefix(s, "unix://"), strings.HasPrefix(s, "unixgram://"):
		scheme, path, _ := strings.Cut(s, "://")
		if !strings.HasPrefix(path, "/") || !validPath(path) {
			return "", fmt.Errorf("%q: %w (want %s:///path/to/socket)", s, ErrBadAddr, scheme)
		}
		return scheme + "://" + path, nil
	case strings.HasPrefix(s, "udp://"):
		s = strings.TrimPrefix(s, "udp://")
	case strings.Contains(s, "://"):
		return "", fmt.Errorf("%q: %w (want udp://host:port or unix:///path)", s, ErrBadAddr)
	}
	host, port := s, DefaultPort
	if strings.Contains(s, ":") {
		var err error
		if host, port, err = net.SplitHostPort(s); err != nil {
			return "", fmt.Errorf("%q: %w: %v", s, ErrBadAddr, err)
		}
	}
	if host == "" {
		host = "127.0.0.1"
	}
	if !validHost(host) {
		return "", fmt.Errorf("%q: %w: %q is not a host name or IP address", s, ErrBadAddr, host)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("%q: %w: port %q", s, ErrBadAddr, port)
	}
	return net.JoinHostPort(host, port), nil
}

// validPath accepts a socket path of printable characters, no more than
// a sockaddr_un holds.
func validPath(p string) bool {
	if len(p) >= 108 || !utf8.ValidString(p) {
		return false
	}
	for _, r := range p {
		if r < ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// validHost accepts an IP address or a DNS name.
func validHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	if len(h) > 253 {
		return false
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_') {
			return false
		}
	}
	return true
}
