// Command validate checks stallwatch's Kubernetes manifests against the
// Kubernetes API's own types: every document is decoded strictly into the
// k8s.io/api type its apiVersion and kind name (a field the API does not
// have, or a value of the wrong type, is an error), and then held to what
// the DaemonSet must be (host PID namespace, the four capabilities and no
// more, not privileged, resource limits, the configuration mounted).
//
// It is a module of its own so that stallwatch's dependencies stay few:
//
//	cd deploy/validate && go run . ../kubernetes/*.yaml
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: validate MANIFEST.yaml...")
		os.Exit(2)
	}
	var objs []any
	failed := false
	for _, path := range os.Args[1:] {
		got, err := decodeFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			failed = true
			continue
		}
		objs = append(objs, got...)
	}
	for _, err := range checkSet(objs) {
		fmt.Fprintln(os.Stderr, err)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
	fmt.Printf("%d manifests valid\n", len(objs))
}

// decodeFile decodes every document of a YAML file.
func decodeFile(path string) ([]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []any
	for i, doc := range splitDocuments(b) {
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, err := decode(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		out = append(out, obj)
	}
	return out, nil
}

func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if bytes.Equal(bytes.TrimRight(line, "\r\n"), []byte("---")) {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

func stripComments(b []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}

// decode decodes one document strictly into its API type.
func decode(doc []byte) (any, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + "/" + tm.Kind {
	case "apps/v1/DaemonSet":
		obj = &appsv1.DaemonSet{}
	case "v1/ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1/Namespace":
		obj = &corev1.Namespace{}
	default:
		return nil, fmt.Errorf("%s %s: not a kind this validator knows", tm.APIVersion, tm.Kind)
	}
	// As the API server decodes: field names match case and all,
	// unknown and duplicate fields are errors.
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%s: %w", tm.Kind, errors.Join(strict...))
	}
	return obj, nil
}

// wantCaps are the capabilities the DaemonSet adds, and all it adds.
var wantCaps = []corev1.Capability{"PERFMON", "SYS_PTRACE", "SYSLOG", "NET_RAW"}

// checkSet holds the manifests to what stallwatch needs of them.
func checkSet(objs []any) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	configMaps := map[string]*corev1.ConfigMap{}
	namespaces := map[string]bool{}
	var dss []*appsv1.DaemonSet
	for _, o := range objs {
		switch v := o.(type) {
		case *corev1.ConfigMap:
			configMaps[v.Namespace+"/"+v.Name] = v
			namespaces[v.Namespace] = namespaces[v.Namespace] || false
		case *corev1.Namespace:
			namespaces[v.Name] = true
		case *appsv1.DaemonSet:
			dss = append(dss, v)
		}
	}
	if len(dss) != 1 {
		fail("want one DaemonSet, found %d", len(dss))
		return errs
	}
	ds := dss[0]
	if !namespaces[ds.Namespace] {
		fail("DaemonSet %s: its namespace %q is not among the manifests", ds.Name, ds.Namespace)
	}
	spec := ds.Spec.Template.Spec
	if ds.Spec.Selector == nil || !matches(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
		fail("DaemonSet %s: the selector does not select the pod template's labels", ds.Name)
	}
	if !spec.HostPID {
		fail("DaemonSet %s: hostPID must be true (perf_event_open and ptrace take the host's pids)", ds.Name)
	}
	if !spec.HostNetwork {
		fail("DaemonSet %s: hostNetwork must be true (the DogStatsD tap reads the node's interfaces)", ds.Name)
	}
	if len(spec.Containers) != 1 {
		fail("DaemonSet %s: want one container", ds.Name)
		return errs
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		fail("container %s: no securityContext", c.Name)
	case sc.Privileged != nil && *sc.Privileged:
		fail("container %s: privileged; it needs only %v", c.Name, wantCaps)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		fail("container %s: capabilities must drop ALL", c.Name)
	default:
		add := slices.Clone(sc.Capabilities.Add)
		slices.Sort(add)
		want := slices.Clone(wantCaps)
		slices.Sort(want)
		if !slices.Equal(add, want) {
			fail("container %s: adds capabilities %v, want exactly %v", c.Name, sc.Capabilities.Add, wantCaps)
		}
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Limits[r]; !ok {
			fail("container %s: no %s limit", c.Name, r)
		}
		if _, ok := c.Resources.Requests[r]; !ok {
			fail("container %s: no %s request", c.Name, r)
		}
	}
	mounted := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounted[m.Name] = m.MountPath
	}
	for _, v := range spec.Volumes {
		if _, ok := mounted[v.Name]; !ok {
			fail("volume %s is not mounted", v.Name)
		}
		delete(mounted, v.Name)
		if v.ConfigMap != nil {
			cm := configMaps[ds.Namespace+"/"+v.ConfigMap.Name]
			if cm == nil {
				fail("volume %s: ConfigMap %s/%s is not among the manifests", v.Name, ds.Namespace, v.ConfigMap.Name)
			} else if !configArg(c.Args, cm) {
				fail("container %s: --config names no key of ConfigMap %s", c.Name, cm.Name)
			}
		}
	}
	for name := range mounted {
		fail("volume mount %s has no volume", name)
	}
	return errs
}

func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// configArg reports whether the container's --config names a key of cm
// under /etc/stallwatch.
func configArg(args []string, cm *corev1.ConfigMap) bool {
	for _, a := range args {
		if p, ok := strings.CutPrefix(a, "--config="); ok {
			key, ok := strings.CutPrefix(p, "/etc/stallwatch/")
			_, has := cm.Data[key]
			return ok && has
		}
	}
	return false
}
