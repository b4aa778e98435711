// Package alert tells Datadog about stalls through DogStatsD, with the
// client the field uses (github.com/DataDog/datadog-go/v5): an event when a
// target stalls, one when its capture is written and one when it recovers
// (the three share an aggregation key, so one stall is one thread in the
// event stream); the service check stallwatch.target.responsive (critical
// while stalled, ok otherwise); and the metrics stallwatch.stall.active,
// stallwatch.stall.duration, stallwatch.heartbeat.age, stallwatch.captures
// and stallwatch.samples.lost.
//
// One Client serves every target of a stallwatch process; each call names
// its Target. A Client with no address sends nothing and says nothing; one
// whose agent cannot be reached says so once and never stands in the way of
// a capture: every call returns at once, whatever the socket does.
//
// ResolveAddr finds the address the way Datadog's libraries do: a flag,
// else DD_DOGSTATSD_URL, else DD_AGENT_HOST with DD_DOGSTATSD_PORT (8125),
// else the agent's default socket when it exists.
package alert
