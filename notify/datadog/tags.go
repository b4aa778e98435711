package datadog

import "strings"

// ParseTags reads a list of tags as Datadog's libraries read DD_TAGS: "k:v"
// items separated by commas or spaces; empty items are skipped, and a tag
// keeps at most 200 characters (Datadog's limit).
func ParseTags(s string) []string {
	var tags []string
	for _, t := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		if len(t) > 200 {
			t = t[:200]
		}
		tags = append(tags, t)
	}
	return tags
}

// CommonTags are the tags of everything sent: service, env, version and host
// when known, then the user's own (which may not repeat those four keys:
// the named values win).
func CommonTags(service, env, version, host string, user []string) []string {
	var tags []string
	named := map[string]bool{}
	for _, kv := range [][2]string{{"service", service}, {"env", env}, {"version", version}, {"host", host}} {
		if kv[1] != "" {
			tags = append(tags, kv[0]+":"+TagValue(kv[1]))
			named[kv[0]] = true
		}
	}
	for _, t := range user {
		k, _, _ := strings.Cut(t, ":")
		if !named[k] {
			tags = append(tags, t)
		}
	}
	return tags
}

// TagValue makes s safe as a tag's value in both DogStatsD datagrams and
// tags_profiler: the separators ',', '|', '#' and white space become '_'.
func TagValue(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ',', '|', '#', ' ', '\t', '\n', '\r':
			return '_'
		}
		if r < ' ' || r == 0x7f {
			return '_'
		}
		return r
	}, s)
}
