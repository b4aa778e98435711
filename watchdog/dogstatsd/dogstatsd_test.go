package dogstatsd

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"app.heartbeat", "app.heartbeat", true},
		{"app.heartbeat", "app.heartbeats", false},
		{"app.*", "app.http.requests", true},
		{"app.*", "app.", true},
		{"app.*", "ap", false},
		{"*.heartbeat", "svc.exporter.heartbeat", true},
		{"*beat*", "heartbeat.count", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*", "", true},
		{"", "", true},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"**", "x", true},
	}
	for _, tc := range tests {
		if got := globMatch(tc.pattern, []byte(tc.name)); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestScanDatagram(t *testing.T) {
	tests := []struct {
		name      string
		m         matcher
		dg        string
		beat      bool
		malformed bool
	}{
		{"gauge", matcher{glob: "app.heartbeat"}, "app.heartbeat:1|g", true, false},
		{"other metric", matcher{glob: "app.heartbeat"}, "app.requests:1|c", false, false},
		{"any metric", matcher{}, "x:1|c", true, false},
		{"second line", matcher{glob: "app.heartbeat"}, "a:1|c\napp.heartbeat:1|c|#env:prod\n", true, false},
		{"crlf", matcher{glob: "hb"}, "hb:1|c\r\n", true, false},
		{"rate, tags, container, timestamp", matcher{glob: "hb"}, "hb:1|c|@0.5|#a:b|c:abc|T1700000000", true, false},
		{"multi-value", matcher{glob: "hb"}, "hb:1:2:3|d", true, false},
		{"tag required and present", matcher{glob: "hb", tags: []string{"env:prod"}}, "hb:1|c|#svc:x,env:prod", true, false},
		{"tag required, other value", matcher{glob: "hb", tags: []string{"env:prod"}}, "hb:1|c|#env:staging", false, false},
		{"tag required, prefix only", matcher{glob: "hb", tags: []string{"env:prod"}}, "hb:1|c|#env:production", false, false},
		{"tag required, none", matcher{glob: "hb", tags: []string{"env:prod"}}, "hb:1|c", false, false},
		{"event is no metric", matcher{}, "_e{5,4}:title|text|#hb", false, false},
		{"service check is no metric", matcher{}, "_sc|hb|0", false, false},
		{"no type", matcher{}, "hb:1", false, true},
		{"no value", matcher{}, "hb|c", false, true},
		{"empty value", matcher{}, "hb:|c", false, true},
		{"no name", matcher{}, ":1|c", false, true},
		{"bad type", matcher{}, "hb:1|zz", false, true},
		{"bad event", matcher{}, "_e{5", false, true},
		{"bad service check", matcher{}, "_sc|x", false, true},
		{"garbage then a beat", matcher{glob: "hb"}, "\x00\xff\nhb:1|c", true, true},
		{"empty", matcher{}, "", false, false},
		{"only newlines", matcher{}, "\n\n", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			beat, why := tc.m.scan([]byte(tc.dg))
			if beat != tc.beat || (why != "") != tc.malformed {
				t.Errorf("scan(%q) = beat %v, malformed %q; want beat %v, malformed %v", tc.dg, beat, why, tc.beat, tc.malformed)
			}
		})
	}
}

func TestParseStatsdAddr(t *testing.T) {
	tests := []struct {
		in       string
		listen   bool
		net, adr string
		err      bool
	}{
		{"udp://127.0.0.1:8125", true, "udp", "127.0.0.1:8125", false},
		{"udp://:8125", true, "udp", "127.0.0.1:8125", false},
		{"udp://0.0.0.0:8125", true, "udp", "0.0.0.0:8125", false},
		{"localhost:8125", false, "udp", "localhost:8125", false},
		{"udp://[::1]:8125", false, "udp", "[::1]:8125", false},
		{"unix:///var/run/datadog/dsd.socket", false, "unixgram", "/var/run/datadog/dsd.socket", false},
		{"unixgram:///tmp/x", true, "unixgram", "/tmp/x", false},
		{"/tmp/x.sock", true, "unixgram", "/tmp/x.sock", false},
		{"udp://:8125", false, "", "", true},
		{"udp://host", true, "", "", true},
		{"unix://relative", true, "", "", true},
		{"", true, "", "", true},
	}
	for _, tc := range tests {
		n, a, err := parseStatsdAddr(tc.in, tc.listen)
		if (err != nil) != tc.err || n != tc.net || a != tc.adr {
			t.Errorf("parseStatsdAddr(%q, %v) = %q %q %v; want %q %q err=%v", tc.in, tc.listen, n, a, err, tc.net, tc.adr, tc.err)
		}
	}
}

func TestCheckNoLoop(t *testing.T) {
	tests := []struct {
		lnet, laddr, fnet, faddr string
		loop                     bool
	}{
		{"udp", "127.0.0.1:8125", "udp", "127.0.0.1:8125", true},
		{"udp", "127.0.0.1:8125", "udp", "localhost:8125", true},
		{"udp", "0.0.0.0:8125", "udp", "10.1.2.3:8125", true},
		{"udp", "127.0.0.1:18125", "udp", "127.0.0.1:8125", false},
		{"udp", "127.0.0.1:8125", "udp", "10.1.2.3:8125", false},
		{"unixgram", "/a", "unixgram", "/a", true},
		{"unixgram", "/a", "unixgram", "/b", false},
		{"unixgram", "/a", "udp", "127.0.0.1:8125", false},
	}
	for _, tc := range tests {
		err := checkNoLoop(tc.lnet, tc.laddr, tc.fnet, tc.faddr)
		if (err != nil) != tc.loop {
			t.Errorf("checkNoLoop(%s %s → %s %s) = %v, want loop=%v", tc.lnet, tc.laddr, tc.fnet, tc.faddr, err, tc.loop)
		}
	}
}

// FuzzScanDatagram feeds arbitrary datagrams to the heartbeat scanner: no
// panic, and a datagram holding a matching line beats whatever surrounds
// it.
func FuzzScanDatagram(f *testing.F) {
	for _, seed := range []string{
		"app.heartbeat:1|g",
		"a:1|c\napp.heartbeat:1|c|#env:prod\n",
		"hb:1|c|@0.5|#a:b|c:abc|T1700000000",
		"_e{5,4}:title|text|#hb",
		"_sc|hb|0|#env:prod",
		"hb:1:2:3|d",
		"\x00\xff|||::#,,",
		"hb",
	} {
		f.Add([]byte(seed), "app.*", "env:prod")
	}
	f.Fuzz(func(t *testing.T, dg []byte, glob, tag string) {
		m := matcher{glob: glob}
		if checkTag(tag) == nil {
			m.tags = []string{tag}
		}
		// The scanner reads every datagram the target sends: it may
		// not allocate, whatever the datagram holds.
		if n := testing.AllocsPerRun(5, func() { m.scan(dg) }); n != 0 {
			t.Fatalf("scanning %d bytes allocated %v times", len(dg), n)
		}
		line := "app.heartbeat:1|c"
		if m.tags != nil {
			line += "|#" + tag
		}
		if !globMatch(glob, []byte("app.heartbeat")) {
			return
		}
		withBeat := append(append(append([]byte(nil), dg...), '\n'), line...)
		if beat, _ := m.scan(withBeat); !beat {
			t.Errorf("datagram %q ending in matching line %q is no beat", dg, line)
		}
	})
}

// TestREADMEJuliaHeartbeat: the datagram the dependency-free Julia
// heartbeat of docs/deploy.md sends is a beat of the metric the page's
// rule names (Julia cannot run here: the snippet is checked as text).
func TestREADMEJuliaHeartbeat(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Sockets\.send\(sock, ip"127\.0\.0\.1", 8125, "([^"]+)"\)`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("docs/deploy.md has no Julia Sockets.send heartbeat")
	}
	mm, err := NewMetricMatcher("myapp.exporter.*", nil)
	if err != nil {
		t.Fatal(err)
	}
	if beat, malformed := mm.Scan(m[1]); !beat || malformed != "" {
		t.Errorf("%q: beat %v, malformed %q; want a beat of myapp.exporter.*", m[1], beat, malformed)
	}
}
