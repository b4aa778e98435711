// Package dogstatsd is the DogStatsD heartbeat: a target that sends
// metrics to the Datadog agent beats when one of its datagrams carries a
// metric the user named (--metric GLOB, --metric-tag k:v). Both ways of
// seeing those datagrams live here, one over the other:
//
//   - the proxy (Listen, Proxy: --heartbeat-statsd): stallwatch listens
//     in the agent's place, for a target pointed at it on purpose, and
//     forwards every datagram to the agent byte for byte (--forward). It
//     serves what a packet socket cannot see — a unix socket — and a
//     single process whose metrics are sent to stallwatch;
//   - the tap (package watchdog/dogstatsd/tap: --heartbeat-tap), which
//     stands in nobody's path: it reads the datagrams services already
//     send to the agent from a packet socket and names the process that
//     sent each one, for the daemon's many targets.
//
// This package owns what the two share: reading a datagram's lines just
// enough to find heartbeats (dogstatsd.go: metric lines, events and
// service checks told apart, malformed lines counted, nothing allocated
// from the datagram) and MetricMatcher, which says which metric lines
// are heartbeats. Datagrams come from processes stallwatch does not
// trust: the parser never panics and never allocates from them.
//
// Both give package watchdog a Source (Run beats; String names the
// heartbeat in triggers and logs); what a stall is stays the watchdog's.
package dogstatsd
