package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func load(t *testing.T) []any {
	t.Helper()
	paths, _ := filepath.Glob("../kubernetes/*.yaml")
	var objs []any
	for _, p := range paths {
		got, err := decodeFile(p)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, got...)
	}
	return objs
}

func TestManifests(t *testing.T) {
	if errs := checkSet(load(t)); len(errs) > 0 {
		t.Fatal(errs)
	}
}

// TestStrict: what the API server would refuse is refused here.
func TestStrict(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\nextra: 1\n", `unknown field "extra"`},
		{"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      hostPid: true\n", `unknown field "spec.template.spec.hostPid"`},
		{"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n", "already set"},
		{"apiVersion: v1\nkind: Pod\n", "not a kind"},
	} {
		_, err := decode([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("decode(%q) = %v, want %q", c.doc, err, c.want)
		}
	}
}

// TestChecks: a DaemonSet that asks for more, or less, than it needs.
func TestChecks(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(doc string) string
		want   string
	}{
		{"privileged", func(d string) string { return strings.Replace(d, "privileged: false", "privileged: true", 1) }, "privileged"},
		{"more capabilities", func(d string) string { return strings.Replace(d, `"NET_RAW"]`, `"NET_RAW", "SYS_ADMIN"]`, 1) }, "want exactly"},
		{"no hostPID", func(d string) string { return strings.Replace(d, "hostPID: true", "hostPID: false", 1) }, "hostPID"},
		{"no limits", func(d string) string {
			return strings.Replace(d, "            limits:\n              cpu: \"1\"\n              memory: 512Mi\n", "", 1)
		}, "no cpu limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			paths, _ := filepath.Glob("../kubernetes/*.yaml")
			var all []any
			for _, p := range paths {
				if strings.HasSuffix(p, "daemonset.yaml") {
					continue
				}
				got, _ := decodeFile(p)
				all = append(all, got...)
			}
			ds, err := decode([]byte(c.change(readDaemonSet(t))))
			if err != nil {
				t.Fatal(err)
			}
			errs := checkSet(append(all, ds))
			if len(errs) == 0 || !strings.Contains(errs[0].Error(), c.want) {
				t.Errorf("errors %v, want %q", errs, c.want)
			}
		})
	}
}

func readDaemonSet(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../kubernetes/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
