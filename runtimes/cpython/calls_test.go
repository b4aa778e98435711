package cpython

import (
	"reflect"
	"testing"
)

func TestCalls(t *testing.T) {
	f := func(name string, entry bool) Frame { return Frame{Function: name, Entry: entry} }
	names := func(calls [][]Frame) [][]string {
		var out [][]string
		for _, c := range calls {
			var n []string
			for _, fr := range c {
				n = append(n, fr.Function)
			}
			out = append(out, n)
		}
		return out
	}
	cases := []struct {
		name   string
		frames []Frame
		want   [][]string
	}{
		{"none", nil, nil},
		{"one call per frame (3.8-3.10, -X perf)", []Frame{f("a", true), f("b", true)}, [][]string{{"a"}, {"b"}}},
		{"inlined calls (3.11+)", []Frame{f("leaf", false), f("mid", false), f("run", true), f("<module>", true)}, [][]string{{"leaf", "mid", "run"}, {"<module>"}}},
		{"cut short after an entry", []Frame{f("leaf", true), f("mid", false)}, [][]string{{"leaf"}, {"mid"}}},
	}
	for _, c := range cases {
		if got := names(Calls(c.frames)); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
