package alert

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/DataDog/datadog-go/v5/statsd"

	"github.com/stallwatch/stallwatch/notify/datadog"
)

// The names this package sends. Datadog's monitors and dashboards refer to
// them; they are part of stallwatch's contract.
const (
	MetricStallActive  = "stallwatch.stall.active"   // gauge 0/1
	MetricStallLength  = "stallwatch.stall.duration" // distribution, seconds, at recovery
	MetricHeartbeatAge = "stallwatch.heartbeat.age"  // gauge, seconds since the last beat
	MetricCaptures     = "stallwatch.captures"       // count, tagged trigger
	MetricSamplesLost  = "stallwatch.samples.lost"   // count
	CheckResponsive    = "stallwatch.target.responsive"
	SourceType         = "stallwatch"
)

// maxText keeps an event in one datagram: the agent reads 8 KiB by default
// (dogstatsd_buffer_size) and Datadog keeps 4,000 characters of a text.
const maxText = 3800

// payloadSize is the largest datagram sent: the agent's default buffer.
// datadog-go's UDP default (1,432 bytes) would refuse an event with findings.
const payloadSize = 8192

// Config configures a Client.
type Config struct {
	// Addr is a DogStatsD address as ResolveAddr returns it; "" sends
	// nothing.
	Addr string
	// Tags go on everything sent: service, env, version, host and the
	// user's own.
	Tags []string
	// Hostname is the host of events and service checks (default
	// os.Hostname).
	Hostname string
	Logger   *slog.Logger
}

// Target is a watched process, as alerts name it.
type Target struct {
	PID     int
	Process string // its command name (comm)
	// Name is what titles call it: its service, else its process name.
	Name string
	// Tags are the target's own, after Config.Tags (a daemon's rule may
	// give a service per target).
	Tags []string
}

// Stall describes a stall as far as it is known.
type Stall struct {
	Start  time.Time     // the last heartbeat before the silence
	For    time.Duration // the silence at the moment of the call
	Source string        // the silent heartbeat(s)
	Reason string        // a sentence, as the capture's report has it
}

// Capture is a capture written to disk.
type Capture struct {
	Dir      string
	Trigger  string // stall, signal, manual
	Stall    *Stall // the stall it belongs to; nil for one on demand
	Findings []string
	Samples  int
	Lost     uint64
	CutShort string // why it was cut short, or ""
}

// Client sends alerts for any number of targets. Its methods never block
// on the network for long (datadog-go's write timeout) and never fail:
// what cannot be sent is counted and warned about once. A nil *Client
// sends nothing, as one without an address.
type Client struct {
	cfg    Config
	log    *slog.Logger
	c      *statsd.Client
	warned atomic.Bool
	errs   atomic.Uint64
	mu     sync.Mutex // serializes a group of datagrams and its flush
}

// New returns a client for cfg. An address that cannot be used at all
// (malformed) is an error; one that does not answer is only warned about,
// and the client goes on trying: the agent may come up later.
func New(cfg Config) (*Client, error) {
	c := &Client{cfg: cfg, log: cfg.Logger}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.cfg.Hostname == "" {
		c.cfg.Hostname, _ = os.Hostname()
	}
	if cfg.Addr == "" {
		return c, nil
	}
	if _, err := ParseAddr(cfg.Addr); err != nil {
		return nil, fmt.Errorf("alert: %w", err)
	}
	if sock, ok := socketPath(cfg.Addr); ok {
		if _, err := os.Stat(sock); err != nil {
			c.warnOnce(fmt.Errorf("no socket at %s: %w", sock, err))
		}
	}
	sc, err := statsd.New(cfg.Addr,
		// Origin detection would name stallwatch's container, not the
		// target's: the target is named by its tags instead.
		statsd.WithoutOriginDetection(),
		statsd.WithoutTelemetry(),
		// Alerts are few and must leave at once; each call flushes.
		statsd.WithoutClientSideAggregation(),
		statsd.WithMaxBytesPerPayload(payloadSize),
		statsd.WithErrorHandler(func(err error) { c.errs.Add(1); c.warnOnce(err) }),
	)
	if err != nil {
		// Only a host name that does not resolve gets here.
		c.warnOnce(err)
		return c, nil
	}
	c.c = sc
	return c, nil
}

// Enabled says whether the client sends anything.
func (c *Client) Enabled() bool { return c != nil && c.c != nil }

func socketPath(addr string) (string, bool) {
	for _, p := range []string{"unix://", "unixgram://", "unixstream://"} {
		if s, ok := strings.CutPrefix(addr, p); ok {
			return s, true
		}
	}
	return "", false
}

func (c *Client) warnOnce(err error) {
	if c.warned.CompareAndSwap(false, true) {
		c.log.Warn("DogStatsD alerts cannot be sent; capturing goes on", "addr", c.cfg.Addr, "err", err)
	}
}

// Failed is how many datagrams could not be sent so far.
func (c *Client) Failed() uint64 { return c.errs.Load() }

// Close sends what is buffered and releases the socket.
func (c *Client) Close() error {
	if !c.Enabled() {
		return nil
	}
	err := c.c.Close()
	if n := c.errs.Load(); n > 0 {
		c.log.Warn("some DogStatsD alerts were not sent", "addr", c.cfg.Addr, "failed_writes", n)
	}
	return err
}

// send runs fn with the client and flushes, so that what fn sends leaves
// now and together.
func (c *Client) send(fn func(sc *statsd.Client) error) {
	if !c.Enabled() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err := fn(c.c)
	err = errors.Join(err, c.c.Flush())
	if err != nil {
		c.errs.Add(1)
		c.warnOnce(err)
	}
}

// tags are the tags of everything about t, then extra.
func (c *Client) tags(t Target, extra ...string) []string {
	tags := make([]string, 0, len(c.cfg.Tags)+len(t.Tags)+2+len(extra))
	tags = append(tags, c.cfg.Tags...)
	tags = append(tags, t.Tags...)
	tags = append(tags, "pid:"+strconv.Itoa(t.PID))
	if t.Process != "" {
		tags = append(tags, "process:"+datadog.TagValue(t.Process))
	}
	return append(tags, extra...)
}

// aggregationKey makes the events of one stall of one target one thread:
// the host, the pid and the stall's last beat (Datadog keeps 100 bytes).
func (c *Client) aggregationKey(t Target, s Stall) string {
	k := fmt.Sprintf("stallwatch:%d:%d:%s", t.PID, s.Start.UnixMilli(), c.cfg.Hostname)
	if len(k) > 100 {
		k = k[:100]
	}
	return k
}

// name is what titles call t. A process name is the target's to choose:
// a newline in it would end the datagram's line.
func name(t Target) string {
	n := t.Name
	if n == "" {
		n = t.Process
	}
	if n == "" {
		return "pid " + strconv.Itoa(t.PID)
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, n)
}

// Stalled says that t stopped beating: an error event, the service check
// critical, stall.active 1. It is sent at the trigger, before any capture.
func (c *Client) Stalled(t Target, s Stall) {
	if !c.Enabled() {
		return
	}
	var text strings.Builder
	fmt.Fprintf(&text, "%s (pid %d) gave no heartbeat for %s", name(t), t.PID, seconds(s.For))
	if s.Source != "" {
		fmt.Fprintf(&text, " from %s", s.Source)
	}
	fmt.Fprintf(&text, " (last beat %s).", s.Start.UTC().Format(time.RFC3339Nano))
	if s.Reason != "" {
		fmt.Fprintf(&text, "\n%s.", s.Reason)
	}
	text.WriteString("\nstallwatch is capturing what every thread is doing; an event follows when the capture is written.")
	tags := c.tags(t, "trigger:stall")
	c.send(func(sc *statsd.Client) error {
		return errors.Join(
			sc.Event(&statsd.Event{
				Title:          fmt.Sprintf("%s (pid %d) stalled: no heartbeat for %s", name(t), t.PID, seconds(s.For)),
				Text:           clip(text.String()),
				Timestamp:      time.Now(),
				Hostname:       c.cfg.Hostname,
				AggregationKey: c.aggregationKey(t, s),
				Priority:       statsd.Normal,
				SourceTypeName: SourceType,
				AlertType:      statsd.Error,
				Tags:           tags,
			}),
			sc.ServiceCheck(&statsd.ServiceCheck{
				Name: CheckResponsive, Status: statsd.Critical, Timestamp: time.Now(), Hostname: c.cfg.Hostname,
				Message: fmt.Sprintf("no heartbeat for %s", seconds(s.For)), Tags: c.tags(t),
			}),
			sc.Gauge(MetricStallActive, 1, c.tags(t), 1),
		)
	})
}

// Captured says that a capture of t was written: the count of captures by
// trigger, the samples lost, and, for a capture of a stall, an event in the
// stall's thread with the top findings and where the capture is.
func (c *Client) Captured(t Target, cp Capture) {
	if !c.Enabled() {
		return
	}
	trig := "trigger:" + datadog.TagValue(cp.Trigger)
	c.send(func(sc *statsd.Client) error {
		errs := []error{
			sc.Count(MetricCaptures, 1, c.tags(t, trig), 1),
			sc.Count(MetricSamplesLost, int64(min(cp.Lost, 1<<62)), c.tags(t, trig), 1),
		}
		ev := &statsd.Event{
			Title:          fmt.Sprintf("%s (pid %d): capture written", name(t), t.PID),
			Text:           clip(captureText(t, cp)),
			Timestamp:      time.Now(),
			Hostname:       c.cfg.Hostname,
			Priority:       statsd.Low,
			SourceTypeName: SourceType,
			AlertType:      statsd.Info,
			Tags:           c.tags(t, trig),
		}
		if cp.Stall != nil {
			ev.Title = fmt.Sprintf("%s (pid %d) stalled: capture written after %s without a heartbeat", name(t), t.PID, seconds(cp.Stall.For))
			ev.AggregationKey = c.aggregationKey(t, *cp.Stall)
			ev.Priority = statsd.Normal
			ev.AlertType = statsd.Error
		}
		return errors.Join(append(errs, sc.Event(ev))...)
	})
}

func captureText(t Target, cp Capture) string {
	var b strings.Builder
	if len(cp.Findings) == 0 {
		b.WriteString("No finding stands out; see the report.\n")
	}
	for _, f := range cp.Findings {
		fmt.Fprintf(&b, "* %s\n", f)
	}
	fmt.Fprintf(&b, "\nCapture: %s\n", cp.Dir)
	fmt.Fprintf(&b, "%d on-CPU samples", cp.Samples)
	if cp.Lost > 0 {
		fmt.Fprintf(&b, ", %d lost", cp.Lost)
	}
	if cp.CutShort != "" {
		fmt.Fprintf(&b, "; cut short: %s", cp.CutShort)
	}
	b.WriteString(".")
	return b.String()
}

// Recovered says that t beats again after a stall of length: a success
// event that closes the stall's thread, the service check ok, stall.active
// 0 and the stall's duration.
func (c *Client) Recovered(t Target, s Stall, length time.Duration, captures []string) {
	if !c.Enabled() {
		return
	}
	text := fmt.Sprintf("%s (pid %d) beats again after %s without a heartbeat.", name(t), t.PID, seconds(length))
	if len(captures) > 0 {
		text += "\nCaptures of this stall:\n" + strings.Join(captures, "\n")
	}
	c.send(func(sc *statsd.Client) error {
		return errors.Join(
			sc.Event(&statsd.Event{
				Title:          fmt.Sprintf("%s (pid %d) recovered after %s", name(t), t.PID, seconds(length)),
				Text:           clip(text),
				Timestamp:      time.Now(),
				Hostname:       c.cfg.Hostname,
				AggregationKey: c.aggregationKey(t, s),
				Priority:       statsd.Normal,
				SourceTypeName: SourceType,
				AlertType:      statsd.Success,
				Tags:           c.tags(t),
			}),
			sc.ServiceCheck(&statsd.ServiceCheck{
				Name: CheckResponsive, Status: statsd.Ok, Timestamp: time.Now(), Hostname: c.cfg.Hostname,
				Message: fmt.Sprintf("recovered after %s", seconds(length)), Tags: c.tags(t),
			}),
			sc.Gauge(MetricStallActive, 0, c.tags(t), 1),
			sc.Distribution(MetricStallLength, length.Seconds(), c.tags(t), 1),
		)
	})
}

// Exited says that t exited; during a stall (s not nil) a warning event
// closes the stall's thread. The service check is not sent again: nothing
// is left to be responsive.
func (c *Client) Exited(t Target, s *Stall) {
	if !c.Enabled() {
		return
	}
	c.send(func(sc *statsd.Client) error {
		errs := []error{sc.Gauge(MetricStallActive, 0, c.tags(t), 1)}
		if s != nil {
			errs = append(errs, sc.Event(&statsd.Event{
				Title:          fmt.Sprintf("%s (pid %d) exited during a stall of %s", name(t), t.PID, seconds(s.For)),
				Text:           fmt.Sprintf("%s (pid %d) exited %s after its last heartbeat.", name(t), t.PID, seconds(s.For)),
				Timestamp:      time.Now(),
				Hostname:       c.cfg.Hostname,
				AggregationKey: c.aggregationKey(t, *s),
				Priority:       statsd.Normal,
				SourceTypeName: SourceType,
				AlertType:      statsd.Warning,
				Tags:           c.tags(t),
			}))
		}
		return errors.Join(errs...)
	})
}

// Heartbeat reports t's state now: the age of its oldest heartbeat,
// stall.active, and the service check, so that monitors see data while
// nothing happens.
func (c *Client) Heartbeat(t Target, age time.Duration, stalled bool) {
	if !c.Enabled() {
		return
	}
	status, active, msg := statsd.Ok, 0.0, ""
	if stalled {
		status, active, msg = statsd.Critical, 1, fmt.Sprintf("no heartbeat for %s", seconds(age))
	}
	c.send(func(sc *statsd.Client) error {
		return errors.Join(
			sc.Gauge(MetricHeartbeatAge, age.Seconds(), c.tags(t), 1),
			sc.Gauge(MetricStallActive, active, c.tags(t), 1),
			sc.ServiceCheck(&statsd.ServiceCheck{
				Name: CheckResponsive, Status: status, Timestamp: time.Now(), Hostname: c.cfg.Hostname,
				Message: msg, Tags: c.tags(t),
			}),
		)
	})
}

// seconds writes a duration as people read it in an alert: "12.3s".
func seconds(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

func clip(s string) string {
	if len(s) <= maxText {
		return s
	}
	cut := maxText - len("…")
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
