// Package dsdtest reads DogStatsD datagrams strictly, the way Datadog's
// agent documents the format, for tests that check what stallwatch sends:
// metrics, events (_e{…}) and service checks (_sc|…). It also listens on
// real UDP and unix datagram sockets.
//
// Format (docs.datadoghq.com, "Datagram Format and Shell Usage"):
//
//	<name>:<value>|<type>[|@<rate>][|#<tags>][|c:<container>][|T<unix>]
//	_e{<title bytes>,<text bytes>}:<title>|<text>[|d:<unix>][|h:<host>][|k:<key>][|p:normal|low][|s:<source>][|t:error|warning|info|success][|#<tags>]
//	_sc|<name>|<0-3>[|d:<unix>][|h:<host>][|#<tags>][|m:<message>]
package dsdtest

import (
	"fmt"
	"strconv"
	"strings"
)

// Metric is one metric line.
type Metric struct {
	Name  string
	Value float64
	Type  string // c, g, ms, h, s, d
	Rate  float64
	Tags  []string
}

// Event is one event line; Text has its "\n" escapes undone.
type Event struct {
	Title, Text    string
	Timestamp      int64
	Hostname       string
	AggregationKey string
	Priority       string
	SourceType     string
	AlertType      string
	Tags           []string
}

// ServiceCheck is one service check line.
type ServiceCheck struct {
	Name      string
	Status    int
	Timestamp int64
	Hostname  string
	Tags      []string
	Message   string
}

// Message is one line of a datagram: exactly one field is set.
type Message struct {
	Metric *Metric
	Event  *Event
	Check  *ServiceCheck
}

// Parse reads every line of a datagram; any line that is not DogStatsD
// is an error.
func Parse(dg []byte) ([]Message, error) {
	var out []Message
	for i, line := range strings.Split(string(dg), "\n") {
		if line == "" {
			continue
		}
		var m Message
		var err error
		switch {
		case strings.HasPrefix(line, "_e{"):
			m.Event, err = parseEvent(line)
		case strings.HasPrefix(line, "_sc|"):
			m.Check, err = parseCheck(line)
		default:
			m.Metric, err = parseMetric(line)
		}
		if err != nil {
			return out, fmt.Errorf("line %d %q: %w", i+1, line, err)
		}
		out = append(out, m)
	}
	return out, nil
}

var metricTypes = map[string]bool{"c": true, "g": true, "ms": true, "h": true, "s": true, "d": true}

func parseMetric(line string) (*Metric, error) {
	fields := strings.Split(line, "|")
	name, value, ok := strings.Cut(fields[0], ":")
	if !ok || name == "" {
		return nil, fmt.Errorf("no name:value")
	}
	if strings.ContainsAny(name, " ,#") {
		return nil, fmt.Errorf("metric name %q has a separator", name)
	}
	m := &Metric{Name: name, Rate: 1}
	var err error
	if m.Value, err = strconv.ParseFloat(value, 64); err != nil {
		return nil, fmt.Errorf("value %q: %v", value, err)
	}
	if len(fields) < 2 || !metricTypes[fields[1]] {
		return nil, fmt.Errorf("no metric type")
	}
	m.Type = fields[1]
	for _, f := range fields[2:] {
		switch {
		case strings.HasPrefix(f, "@"):
			if m.Rate, err = strconv.ParseFloat(f[1:], 64); err != nil || m.Rate <= 0 || m.Rate > 1 {
				return nil, fmt.Errorf("sample rate %q", f)
			}
		case strings.HasPrefix(f, "#"):
			if m.Tags, err = parseTags(f[1:]); err != nil {
				return nil, err
			}
		case strings.HasPrefix(f, "c:"), strings.HasPrefix(f, "T"), strings.HasPrefix(f, "e:"):
		default:
			return nil, fmt.Errorf("unknown field %q", f)
		}
	}
	return m, nil
}

func parseEvent(line string) (*Event, error) {
	head, rest, ok := strings.Cut(line[len("_e{"):], "}:")
	if !ok {
		return nil, fmt.Errorf("no {title,text} lengths")
	}
	tl, xl, ok := strings.Cut(head, ",")
	if !ok {
		return nil, fmt.Errorf("lengths %q", head)
	}
	titleLen, err1 := strconv.Atoi(tl)
	textLen, err2 := strconv.Atoi(xl)
	if err1 != nil || err2 != nil || titleLen <= 0 || textLen < 0 {
		return nil, fmt.Errorf("lengths %q", head)
	}
	if len(rest) < titleLen+1+textLen || rest[titleLen] != '|' {
		return nil, fmt.Errorf("title length %d and text length %d do not fit %d bytes", titleLen, textLen, len(rest))
	}
	e := &Event{Title: rest[:titleLen], Text: strings.ReplaceAll(rest[titleLen+1:titleLen+1+textLen], `\n`, "\n")}
	rest = rest[titleLen+1+textLen:]
	if rest != "" && rest[0] != '|' {
		return nil, fmt.Errorf("text longer than its length")
	}
	for _, f := range splitFields(rest) {
		var err error
		switch {
		case strings.HasPrefix(f, "d:"):
			e.Timestamp, err = strconv.ParseInt(f[2:], 10, 64)
		case strings.HasPrefix(f, "h:"):
			e.Hostname = f[2:]
		case strings.HasPrefix(f, "k:"):
			e.AggregationKey = f[2:]
		case strings.HasPrefix(f, "p:"):
			e.Priority = f[2:]
			if e.Priority != "normal" && e.Priority != "low" {
				err = fmt.Errorf("priority %q", e.Priority)
			}
		case strings.HasPrefix(f, "s:"):
			e.SourceType = f[2:]
		case strings.HasPrefix(f, "t:"):
			e.AlertType = f[2:]
			switch e.AlertType {
			case "error", "warning", "info", "success":
			default:
				err = fmt.Errorf("alert type %q", e.AlertType)
			}
		case strings.HasPrefix(f, "#"):
			e.Tags, err = parseTags(f[1:])
		case strings.HasPrefix(f, "c:"), strings.HasPrefix(f, "e:"):
		default:
			err = fmt.Errorf("unknown field %q", f)
		}
		if err != nil {
			return nil, err
		}
	}
	return e, nil
}

func parseCheck(line string) (*ServiceCheck, error) {
	body := line[len("_sc|"):]
	// The message comes last and may contain '|'.
	body, msg, hasMsg := strings.Cut(body, "|m:")
	fields := strings.Split(body, "|")
	if len(fields) < 2 || fields[0] == "" {
		return nil, fmt.Errorf("no name|status")
	}
	st, err := strconv.Atoi(fields[1])
	if err != nil || st < 0 || st > 3 {
		return nil, fmt.Errorf("status %q", fields[1])
	}
	sc := &ServiceCheck{Name: fields[0], Status: st}
	if hasMsg {
		sc.Message = strings.NewReplacer(`\n`, "\n", `m\:`, "m:").Replace(msg)
	}
	for _, f := range fields[2:] {
		switch {
		case strings.HasPrefix(f, "d:"):
			sc.Timestamp, err = strconv.ParseInt(f[2:], 10, 64)
		case strings.HasPrefix(f, "h:"):
			sc.Hostname = f[2:]
		case strings.HasPrefix(f, "#"):
			sc.Tags, err = parseTags(f[1:])
		case strings.HasPrefix(f, "c:"), strings.HasPrefix(f, "e:"):
		default:
			err = fmt.Errorf("unknown field %q", f)
		}
		if err != nil {
			return nil, err
		}
	}
	return sc, nil
}

func splitFields(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s[1:], "|")
}

func parseTags(s string) ([]string, error) {
	tags := strings.Split(s, ",")
	for _, t := range tags {
		if t == "" || strings.ContainsAny(t, " |\n") {
			return nil, fmt.Errorf("tag %q", t)
		}
	}
	return tags, nil
}

// Tag returns the value of the first tag key:value in tags.
func Tag(tags []string, key string) (string, bool) {
	for _, t := range tags {
		if v, ok := strings.CutPrefix(t, key+":"); ok {
			return v, true
		}
	}
	return "", false
}
