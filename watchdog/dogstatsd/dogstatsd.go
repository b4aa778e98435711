package dogstatsd

import (
	"bytes"
	"fmt"
	"strings"
)

// This file reads DogStatsD datagrams just enough to find heartbeats. The
// datagrams come from the target and are untrusted: nothing here allocates
// from them or panics on them.
//
// A datagram is lines separated by '\n'. A metric line is
//
//	name:value[:value...]|type[|@rate][|#tag,tag:value...][|c:...][|T...]
//
// an event starts with "_e{", a service check with "_sc|".

// metricTypes are the types a DogStatsD metric line may carry.
var metricTypes = [][]byte{[]byte("c"), []byte("g"), []byte("ms"), []byte("h"), []byte("s"), []byte("d")}

// matcher says which metric lines are heartbeats.
type matcher struct {
	glob string   // metric name pattern; "" matches every name
	tags []string // "k:v" tags a line must carry, all of them
}

// scan reads one datagram: beat is set when a metric line matches,
// malformed (with the first reason) when any line is not DogStatsD.
func (m *matcher) scan(dg []byte) (beat bool, malformed string) {
	for len(dg) > 0 {
		var line []byte
		line, dg, _ = bytes.Cut(dg, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			continue
		}
		name, tags, why := parseLine(line)
		if why != "" {
			if malformed == "" {
				malformed = why
			}
			continue
		}
		if name != nil && !beat && m.matches(name, tags) {
			beat = true
		}
	}
	return beat, malformed
}

// parseLine returns a metric line's name and tags section (without '#'),
// a nil name for a well-formed event or service check, or why the line is
// malformed.
func parseLine(line []byte) (name, tags []byte, why string) {
	switch {
	case bytes.HasPrefix(line, []byte("_e{")):
		if bytes.IndexByte(line, '}') < 0 || bytes.IndexByte(line, ':') < 0 {
			return nil, nil, "event without {title,text} lengths"
		}
		return nil, nil, ""
	case bytes.HasPrefix(line, []byte("_sc|")):
		if bytes.Count(line, []byte{'|'}) < 2 {
			return nil, nil, "service check without a status"
		}
		return nil, nil, ""
	}
	head, rest, ok := bytes.Cut(line, []byte{'|'})
	if !ok {
		return nil, nil, "metric without a |type"
	}
	name, value, ok := bytes.Cut(head, []byte{':'})
	switch {
	case !ok:
		return nil, nil, "metric without a :value"
	case len(name) == 0:
		return nil, nil, "metric without a name"
	case len(value) == 0:
		return nil, nil, "metric with an empty value"
	}
	typ, rest, _ := bytes.Cut(rest, []byte{'|'})
	if !knownType(typ) {
		return nil, nil, "unknown metric type"
	}
	for len(rest) > 0 {
		var field []byte
		field, rest, _ = bytes.Cut(rest, []byte{'|'})
		if len(field) > 0 && field[0] == '#' {
			tags = field[1:]
		}
	}
	return name, tags, ""
}

func knownType(t []byte) bool {
	for _, k := range metricTypes {
		if bytes.Equal(t, k) {
			return true
		}
	}
	return false
}

func (m *matcher) matches(name, tags []byte) bool {
	if m.glob != "" && !globMatch(m.glob, name) {
		return false
	}
	for _, want := range m.tags {
		if !hasTag(tags, want) {
			return false
		}
	}
	return true
}

func hasTag(tags []byte, want string) bool {
	for len(tags) > 0 {
		var t []byte
		t, tags, _ = bytes.Cut(tags, []byte{','})
		if string(t) == want {
			return true
		}
	}
	return false
}

// globMatch matches name against pattern, where '*' stands for any run of
// bytes (dots included: "app.*" matches "app.http.requests") and '?' for
// one byte. It runs in O(len(pattern)·len(name)) at worst.
func globMatch(pattern string, name []byte) bool {
	p, n := 0, 0
	star, mark := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == name[n]):
			p++
			n++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case star >= 0:
			p = star + 1
			mark++
			n = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// checkTag validates a --metric-tag value.
func checkTag(t string) error {
	if t == "" || strings.ContainsAny(t, ",|\r\n") {
		return fmt.Errorf("metric tag %q: want k:v without ',', '|' or line breaks", t)
	}
	return nil
}

// MetricMatcher says which DogStatsD metric lines are heartbeats: a name
// glob and tags, the rule the proxy uses and the passive tap (package
// tap) shares.
type MetricMatcher struct{ m matcher }

// NewMetricMatcher returns a matcher of metric names against glob ("" any
// name) carrying every tag in tags ("k:v").
func NewMetricMatcher(glob string, tags []string) (*MetricMatcher, error) {
	for _, t := range tags {
		if err := checkTag(t); err != nil {
			return nil, err
		}
	}
	return &MetricMatcher{m: matcher{glob: glob, tags: tags}}, nil
}

// Scan reads one datagram: beat is set when a metric line matches,
// malformed (with the first reason) when any line is not DogStatsD. It
// allocates nothing.
func (m *MetricMatcher) Scan(dg []byte) (beat bool, malformed string) { return m.m.scan(dg) }

// String describes the matcher for logs: "metric app.* #env:prod".
func (m *MetricMatcher) String() string {
	s := "any metric"
	if m.m.glob != "" {
		s = "metric " + m.m.glob
	}
	for _, t := range m.m.tags {
		s += " #" + t
	}
	return s
}
