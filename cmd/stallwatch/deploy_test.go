package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// unitSettings reads a systemd unit's Key=Value lines.
func unitSettings(t *testing.T, text string) map[string][]string {
	t.Helper()
	m := map[string][]string{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("unit line %q", line)
		}
		m[k] = append(m[k], v)
	}
	return m
}

// TestSystemdUnit: the unit as shipped passes systemd-analyze verify (its
// ExecStart pointed at the binary this test built), and says what the
// README promises.
func TestSystemdUnit(t *testing.T) {
	analyze := testutil.RequireTool(t, "systemd-analyze")
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(t), "deploy", "systemd", "stallwatch.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	s := unitSettings(t, unit)
	for k, want := range map[string]string{
		"Type": "notify", "ProtectSystem": "strict", "StateDirectory": "stallwatch", "RuntimeDirectory": "stallwatch",
		"DynamicUser": "yes", "User": "stallwatch", "NoNewPrivileges": "yes", "Restart": "on-failure",
		"RestartPreventExitStatus": "2 3", "WatchdogSec": "60s",
		"ExecStart": "/usr/local/bin/stallwatch daemon --config /etc/stallwatch/stallwatch.yaml",
	} {
		if got := s[k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%v, want %q", k, got, want)
		}
	}
	caps := []string{"CAP_NET_RAW", "CAP_PERFMON", "CAP_SYSLOG", "CAP_SYS_PTRACE"}
	for _, k := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
		got := strings.Fields(strings.Join(s[k], " "))
		slices.Sort(got)
		if !slices.Equal(got, caps) {
			t.Errorf("%s: %v, want exactly %v", k, got, caps)
		}
	}
	dir := t.TempDir()
	local := strings.ReplaceAll(unit, "/usr/local/bin/stallwatch", stallwatchBin(t))
	path := filepath.Join(dir, "stallwatch.service")
	if err := os.WriteFile(path, []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil || strings.Contains(string(out), "stallwatch.service") {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestShippedConfigs: the example configurations (systemd's, and the
// one in the Kubernetes ConfigMap) pass --check.
func TestShippedConfigs(t *testing.T) {
	root := testutil.RepoRoot(t)
	paths := []string{filepath.Join(root, "deploy", "systemd", "stallwatch.yaml")}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["stallwatch.yaml"] == "" {
		t.Fatal("the ConfigMap has no stallwatch.yaml")
	}
	p := filepath.Join(t.TempDir(), "configmap-stallwatch.yaml")
	if err := os.WriteFile(p, []byte(cm.Data["stallwatch.yaml"]), 0o644); err != nil {
		t.Fatal(err)
	}
	paths = append(paths, p)
	for _, p := range paths {
		var stdout, stderr strings.Builder
		if code := run([]string{"daemon", "--check", "--config", p}, &stdout, &stderr); code != 0 {
			t.Errorf("%s: exit %d\n%s", p, code, stderr.String())
		}
	}
}

// TestStaticBuild builds stallwatch as the container recipe does and
// checks that it needs no dynamic loader (it runs in an empty image).
// Docker cannot run here; this is the part of the recipe that can.
func TestStaticBuild(t *testing.T) {
	root := testutil.RepoRoot(t)
	recipe, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(recipe), "CGO_ENABLED=0 go build") || !strings.Contains(string(recipe), "FROM scratch") {
		t.Fatalf("the recipe no longer builds a static binary into an empty image")
	}
	// The tests' stallwatch is built as the recipe builds it.
	out := stallwatchBin(t)
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamic (%v)", p.Type)
		}
	}
}
