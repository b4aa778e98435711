package datadog

import (
	"fmt"
	"net"
	"os"
)

// Service is one of the Datadog agent's services (DogStatsD, the trace
// agent), as Datadog's libraries find it: a flag, else a variable holding
// its whole address, else DD_AGENT_HOST with its port (a variable of its
// own, else the default), else the agent's default unix socket when it
// exists. Each output declares its service once (package notify/alert,
// package notify/upload) and resolves through it.
type Service struct {
	Flag       string // the flag that names it: "--statsd"
	URLVar     string // the variable holding its address: "DD_DOGSTATSD_URL"
	PortVar    string // the variable holding its port beside DD_AGENT_HOST: "DD_DOGSTATSD_PORT"
	Port       string // its default port: "8125"
	Socket     string // the agent's unix socket for it: "/var/run/datadog/dsd.socket"
	SocketName string // what a log line calls that socket: "the agent's default socket"
	// HostPort is the address DD_AGENT_HOST and the port make ("host:port"
	// joined), in the form Parse reads; nil: the joined pair itself.
	HostPort func(hostport string) string
	// Parse checks an address given for the service and returns its
	// canonical form; its errors name the address.
	Parse func(string) (string, error)
}

// Source says where an address came from, for the start-up log line: the
// flag, a variable's name, the socket's, or "" for nowhere.
type Source string

// AgentHost is the variable that names the agent's host for every
// service.
const AgentHost = "DD_AGENT_HOST"

// Resolve returns the service's address and where it came from; an empty
// address with no error means none is configured. getenv reads the
// environment; exists says whether a socket exists (nil: os.Stat). An
// address that does not parse is an error naming the variables it came
// from (or, from the flag, the address alone).
func (s Service) Resolve(flag string, getenv func(string) string, exists func(string) bool) (string, Source, error) {
	if exists == nil {
		exists = func(p string) bool { _, err := os.Stat(p); return err == nil }
	}
	if flag != "" {
		a, err := s.Parse(flag)
		return a, Source(s.Flag), err
	}
	if u := getenv(s.URLVar); u != "" {
		a, err := s.Parse(u)
		if err != nil {
			return "", Source(s.URLVar), fmt.Errorf("%s: %w", s.URLVar, err)
		}
		return a, Source(s.URLVar), nil
	}
	if h := getenv(AgentHost); h != "" {
		port := getenv(s.PortVar)
		if port == "" {
			port = s.Port
		}
		hp := net.JoinHostPort(h, port)
		if s.HostPort != nil {
			hp = s.HostPort(hp)
		}
		a, err := s.Parse(hp)
		if err != nil {
			return "", AgentHost, fmt.Errorf("%s and %s: %w", AgentHost, s.PortVar, err)
		}
		return a, AgentHost, nil
	}
	if s.Socket != "" && exists(s.Socket) {
		return "unix://" + s.Socket, Source(s.SocketName), nil
	}
	return "", "", nil
}
