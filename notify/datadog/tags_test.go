package datadog

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string][]string{
		"":                              nil,
		"team:payments,tier:1":          {"team:payments", "tier:1"},
		"team:payments tier:1":          {"team:payments", "tier:1"},
		" team:payments ,, tier:1 ":     {"team:payments", "tier:1"},
		"region:eu-west-1\tzone:a\nb:c": {"region:eu-west-1", "zone:a", "b:c"},
	} {
		if got := ParseTags(in); !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestCommon(t *testing.T) {
	got := CommonTags("bank", "prod", "1.2.3", "web-1", []string{"team:payments", "service:other", "env:x"})
	want := []string{"service:bank", "env:prod", "version:1.2.3", "host:web-1", "team:payments"}
	if !slices.Equal(got, want) {
		t.Errorf("%q, want %q", got, want)
	}
	if got := CommonTags("", "", "", "", []string{"service:from-tags"}); !slices.Equal(got, []string{"service:from-tags"}) {
		t.Errorf("a service from the user's tags is kept when none is named: %q", got)
	}
	if got := CommonTags("my service", "", "", "", nil); got[0] != "service:my_service" {
		t.Errorf("%q", got)
	}
}
