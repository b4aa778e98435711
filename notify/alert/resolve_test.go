package alert

import (
	"errors"
	"testing"

	"github.com/stallwatch/stallwatch/notify/datadog"
)

// Where an address came from, as the start-up log line says it.
const (
	fromFlag    datadog.Source = "--statsd"
	fromURL     datadog.Source = "DD_DOGSTATSD_URL"
	fromHost    datadog.Source = "DD_AGENT_HOST"
	fromSocket  datadog.Source = "the agent's default socket"
	fromNowhere datadog.Source = ""
)

func TestResolveAddr(t *testing.T) {
	for _, tc := range []struct {
		name   string
		flag   string
		env    map[string]string
		socket bool // the agent's default socket exists
		want   string
		from   datadog.Source
		bad    bool
	}{
		{name: "nothing", want: "", from: fromNowhere},
		{name: "default socket", socket: true, want: "unix://" + DefaultSocket, from: fromSocket},
		{name: "DD_AGENT_HOST alone", env: map[string]string{"DD_AGENT_HOST": "10.0.0.5"}, socket: true, want: "10.0.0.5:8125", from: fromHost},
		{name: "DD_AGENT_HOST with DD_DOGSTATSD_PORT", env: map[string]string{"DD_AGENT_HOST": "agent", "DD_DOGSTATSD_PORT": "9125"}, want: "agent:9125", from: fromHost},
		{name: "DD_AGENT_HOST IPv6", env: map[string]string{"DD_AGENT_HOST": "fd00::1"}, want: "[fd00::1]:8125", from: fromHost},
		{name: "DD_DOGSTATSD_URL udp", env: map[string]string{"DD_DOGSTATSD_URL": "udp://10.1.1.1:8125"}, want: "10.1.1.1:8125", from: fromURL},
		{name: "DD_DOGSTATSD_URL unix", env: map[string]string{"DD_DOGSTATSD_URL": "unix:///run/dd/dsd.socket"}, want: "unix:///run/dd/dsd.socket", from: fromURL},
		{name: "DD_DOGSTATSD_URL over DD_AGENT_HOST", env: map[string]string{"DD_DOGSTATSD_URL": "udp://a:1", "DD_AGENT_HOST": "b"}, want: "a:1", from: fromURL},
		{name: "flag over everything", flag: "udp://127.0.0.1:18125", socket: true,
			env: map[string]string{"DD_DOGSTATSD_URL": "udp://a:1", "DD_AGENT_HOST": "b"}, want: "127.0.0.1:18125", from: fromFlag},
		{name: "flag port only", flag: ":9999", want: "127.0.0.1:9999", from: fromFlag},
		{name: "flag host only", flag: "statsd.local", want: "statsd.local:8125", from: fromFlag},
		{name: "flag socket path", flag: "/run/dsd.socket", want: "unix:///run/dsd.socket", from: fromFlag},
		{name: "flag unixgram", flag: "unixgram:///run/dsd.socket", want: "unixgram:///run/dsd.socket", from: fromFlag},
		{name: "flag http is not DogStatsD", flag: "http://agent:8125", from: fromFlag, bad: true},
		{name: "bad DD_DOGSTATSD_URL", env: map[string]string{"DD_DOGSTATSD_URL": "tcp://x:1"}, from: fromURL, bad: true},
		{name: "unix without path", flag: "unix://host", from: fromFlag, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string { return tc.env[k] }
			exists := func(p string) bool { return tc.socket && p == DefaultSocket }
			got, from, err := ResolveAddr(tc.flag, getenv, exists)
			if tc.bad {
				if !errors.Is(err, ErrBadAddr) {
					t.Fatalf("got %q, %v; want an ErrBadAddr", got, err)
				}
				return
			}
			if err != nil || got != tc.want || from != tc.from {
				t.Fatalf("got %q from %q (%v), want %q from %q", got, from, err, tc.want, tc.from)
			}
		})
	}
}
