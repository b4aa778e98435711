package dsdtest

import "testing"

func TestParse(t *testing.T) {
	good := []string{
		"page.views:1|c",
		"stallwatch.heartbeat.age:1.5|g|#service:bank,pid:7",
		"lat:12|d|@0.5|#a:b|c:ci-123|T1700000000",
		"_e{5,5}:title|te\\nt|d:1700000000|h:web-1|k:key|p:normal|s:stallwatch|t:error|#a:b",
		"_e{3,0}:abc|",
		"_sc|stallwatch.target.responsive|2|d:1700000000|h:web-1|#pid:7|m:no heartbeat for 10s",
		"a:1|c\nb:2|g\n",
	}
	for _, dg := range good {
		if _, err := Parse([]byte(dg)); err != nil {
			t.Errorf("%q: %v", dg, err)
		}
	}
	m, _ := Parse([]byte("_e{5,5}:title|te\\nt|t:error|#a:b"))
	if e := m[0].Event; e == nil || e.Title != "title" || e.Text != "te\nt" || e.AlertType != "error" || e.Tags[0] != "a:b" {
		t.Errorf("event %+v", m[0].Event)
	}
	bad := []string{
		"page.views", "page.views:x|c", "page.views:1|q", "page.views:1|c|@2", "page.views:1|c|#a,,b",
		"page.views:1|c|zz", "_e{5,4}:titl|text", "_e{5,4}:title|textlonger", "_e{5,4}:title|text|t:fatal",
		"_e{5,4}:title|text|p:high", "_e{x,4}:title|text", "_sc|name|7", "_sc||0", "_sc|name|0|q:1",
		"a b:1|c", "x:1|c|#tag with space",
	}
	for _, dg := range bad {
		if _, err := Parse([]byte(dg)); err == nil {
			t.Errorf("%q parsed", dg)
		}
	}
}
