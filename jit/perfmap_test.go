package jit

import (
	"strings"
	"testing"
)

func TestParseMapLine(t *testing.T) {
	for _, c := range []struct {
		line        string
		start, size uint64
		name        string
		bad         string
	}{
		{"7f00 10 JS:*foo /a.js:1:1", 0x7f00, 0x10, "JS:*foo /a.js:1:1", ""},
		{"0x00007f3e68ec7640 0x0000000000000150 long Hot.fibonacci(long)", 0x7f3e68ec7640, 0x150, "long Hot.fibonacci(long)", ""},
		{"0X7F00 0XaB Name", 0x7f00, 0xab, "Name", ""},
		{"7f00\t10\tname\twith tab", 0x7f00, 0x10, "name\twith tab", ""},
		{"7f00 10  two spaces", 0x7f00, 0x10, " two spaces", ""}, // perf takes one separator too
		{"zz 10 name", 0, 0, "", "start \"zz\" is not a hex number"},
		{"7f00 1g name", 0, 0, "", "size \"1g\" is not a hex number"},
		{"7f00 10", 0, 0, "", "no name"},
		{"7f00 10 ", 0, 0, "", "no name"},
		{"0x 10 name", 0, 0, "", "start"},
		{"11112222333344445 10 name", 0, 0, "", "start"},
		{"ffffffffffffffff 10 name", 0, 0, "", "wraps around"},
	} {
		start, size, name, bad := parseMapLine([]byte(c.line))
		if bad != "" || c.bad != "" {
			if c.bad == "" || !strings.Contains(bad, c.bad) {
				t.Errorf("parseMapLine(%q) error %q, want %q", c.line, bad, c.bad)
			}
			continue
		}
		if start != c.start || size != c.size || string(name) != c.name {
			t.Errorf("parseMapLine(%q) = %#x %#x %q, want %#x %#x %q", c.line, start, size, name, c.start, c.size, c.name)
		}
	}
}

func TestPerfMapFile(t *testing.T) {
	text := "1000 100 JS:*old /a.js:1:1\r\n" +
		"\n" +
		"not a line\n" +
		"1000 100 JS:*new /a.js:2:1\n" +
		"0x2000 0x10 long Hot.fibonacci(long)\n" +
		"3000 0 zero-size\n" +
		"4000 10 no newline at the end"
	ix, info := readBytes(t, "perf-1.map", []byte(text))
	if info.Kind != KindPerfMap || info.Records != 7 || info.Bad != 1 || info.Symbols != 4 {
		t.Errorf("info = %+v, want 7 lines, 1 bad, 4 symbols", info)
	}
	if len(info.Problems) != 1 || info.Problems[0].Line != 3 || info.Problems[0].Offset != 29 ||
		!strings.Contains(info.Problems[0].Error(), "perf-1.map:3 (offset 29): start \"not\"") {
		t.Errorf("problems = %v, want line 3 at offset 29", info.Problems)
	}
	if s, ok := ix.Lookup(0x1050); !ok || s.Display != "new" || s.Loaded != 0 {
		t.Errorf("Lookup(0x1050) = %+v: the later line must win", s)
	}
	if s, ok := ix.Lookup(0x2000); !ok || s.Display != "Hot.fibonacci(long)" || s.Runtime != RuntimeJVM {
		t.Errorf("Lookup(0x2000) = %+v", s)
	}
	if s, ok := ix.Lookup(0x4005); !ok || s.Name != "no newline at the end" {
		t.Errorf("a complete file's last line without newline: %+v", s)
	}
}

func TestPerfMapOverlongLine(t *testing.T) {
	text := "1000 10 before\n" + "2000 10 " + strings.Repeat("x", maxBuf+10) + "\n3000 10 after\n"
	ix, info := readBytes(t, "perf-1.map", []byte(text))
	if info.Bad != 1 || info.Symbols != 2 {
		t.Errorf("info = %+v, want the overlong line skipped", info)
	}
	if _, ok := ix.Lookup(0x3000); !ok {
		t.Error("the line after an overlong one was lost")
	}
}
