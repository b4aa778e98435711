package daemon

import (
	"errors"
	"fmt"
	"os/user"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/stallwatch/stallwatch/internal/safedir"
)

// MaxConfigBytes bounds a configuration file.
const MaxConfigBytes = 1 << 20

// File is a configuration file as written: global settings, the settings
// every rule starts from, and the rules. Settings keep their names and
// lines; what they mean is the caller's (stallwatch's flags of the same
// names).
type File struct {
	Path     string
	Globals  []Setting
	Defaults []Setting
	Rules    []RuleSpec
}

// Setting is one setting as written: a name, its values (a sequence gives
// several, a scalar one) and where it is.
type Setting struct {
	Name   string
	Values []string
	Line   int
}

// RuleSpec is one rule as written: its name, which processes it selects,
// and its own settings (after the defaults).
type RuleSpec struct {
	Name     string
	Line     int
	Select   Selector
	Settings []Setting
}

// ConfigError is a configuration that cannot be used: the file, the line
// (0 when none applies) and why.
type ConfigError struct {
	File string
	Line int
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return e.File + ": " + e.Msg
}

// ReadFile reads and parses a configuration file (a regular file of at
// most MaxConfigBytes).
func ReadFile(path string) (*File, error) {
	b, err := safedir.ReadRegular(path, MaxConfigBytes)
	if err != nil {
		return nil, &ConfigError{File: path, Msg: err.Error()}
	}
	return Parse(path, b)
}

var yamlLineRx = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Parse parses a configuration (see the package documentation for its
// form). Every error is a *ConfigError.
func Parse(path string, data []byte) (*File, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(path, err)
	}
	f := &File{Path: path}
	p := &parser{file: path}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, p.errorf(0, "empty: a configuration has at least one rule under \"rules:\"")
	}
	top := doc.Content[0]
	if top.Kind != yaml.MappingNode {
		return nil, p.errorf(top.Line, "a configuration is a mapping of settings and \"rules:\", not a %s", kindName(top))
	}
	seenRules := false
	err := p.mapping(top, func(k, v *yaml.Node) error {
		switch k.Value {
		case "rules":
			seenRules = true
			return p.rules(v, f)
		case "defaults":
			if v.Kind != yaml.MappingNode {
				return p.errorf(v.Line, "defaults: a mapping of rule settings, not a %s", kindName(v))
			}
			return p.mapping(v, func(k, v *yaml.Node) error {
				s, err := p.setting(k, v)
				f.Defaults = append(f.Defaults, s)
				return err
			})
		}
		s, err := p.setting(k, v)
		f.Globals = append(f.Globals, s)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !seenRules || len(f.Rules) == 0 {
		return nil, p.errorf(top.Line, "no rules: a configuration selects processes under \"rules:\"")
	}
	return f, nil
}

// yamlError turns the YAML library's error into a ConfigError with the
// line it names.
func yamlError(path string, err error) error {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	if m := yamlLineRx.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &ConfigError{File: path, Line: line, Msg: m[2]}
	}
	return &ConfigError{File: path, Msg: strings.TrimPrefix(msg, "yaml: ")}
}

type parser struct{ file string }

func (p *parser) errorf(line int, format string, args ...any) error {
	return &ConfigError{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// mapping calls fn for each key and value of a mapping node, refusing a
// key given twice.
func (p *parser) mapping(m *yaml.Node, fn func(k, v *yaml.Node) error) error {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return p.errorf(k.Line, "a key must be a name, not a %s", kindName(k))
		}
		if line, dup := seen[k.Value]; dup {
			return p.errorf(k.Line, "%q is given twice (first on line %d)", k.Value, line)
		}
		seen[k.Value] = k.Line
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// setting reads a setting: a scalar, or a sequence of scalars for a
// setting that may be given several times.
func (p *parser) setting(k, v *yaml.Node) (Setting, error) {
	s := Setting{Name: k.Value, Line: k.Line}
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return s, p.errorf(v.Line, "%s: no value", k.Value)
		}
		s.Values = []string{v.Value}
	case yaml.SequenceNode:
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode {
				return s, p.errorf(e.Line, "%s: a list of values, not of a %s", k.Value, kindName(e))
			}
			s.Values = append(s.Values, e.Value)
		}
	default:
		return s, p.errorf(v.Line, "%s: a value or a list of values, not a %s", k.Value, kindName(v))
	}
	return s, nil
}

func (p *parser) rules(v *yaml.Node, f *File) error {
	if v.Kind != yaml.SequenceNode {
		return p.errorf(v.Line, "rules: a list of rules (each item begins with '- name:'), not a %s", kindName(v))
	}
	names := map[string]int{}
	for _, r := range v.Content {
		spec, err := p.rule(r)
		if err != nil {
			return err
		}
		if line, dup := names[spec.Name]; dup {
			return p.errorf(r.Line, "rule %q: the name is taken by the rule on line %d", spec.Name, line)
		}
		names[spec.Name] = r.Line
		f.Rules = append(f.Rules, spec)
	}
	return nil
}

// ruleNameRx: rule names appear in logs and status; keep them plain.
var ruleNameRx = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

func (p *parser) rule(r *yaml.Node) (RuleSpec, error) {
	spec := RuleSpec{Line: r.Line}
	if r.Kind != yaml.MappingNode {
		return spec, p.errorf(r.Line, "a rule is a mapping (name:, match: and settings), not a %s", kindName(r))
	}
	var match *yaml.Node
	err := p.mapping(r, func(k, v *yaml.Node) error {
		switch k.Value {
		case "name":
			if v.Kind != yaml.ScalarNode || !ruleNameRx.MatchString(v.Value) {
				return p.errorf(v.Line, "name %q: letters, digits, '.', '_' and '-', at most 64", v.Value)
			}
			spec.Name = v.Value
			return nil
		case "match":
			match = v
			return nil
		}
		s, err := p.setting(k, v)
		spec.Settings = append(spec.Settings, s)
		return err
	})
	if err != nil {
		return spec, err
	}
	if spec.Name == "" {
		return spec, p.errorf(r.Line, "a rule without a name: give it one (name: api)")
	}
	if match == nil {
		return spec, p.errorf(r.Line, "rule %q selects nothing: give it match: (cmdline, exe, pidfile, cgroup, container, pod, user)", spec.Name)
	}
	spec.Select, err = p.selector(spec.Name, match)
	return spec, err
}

func (p *parser) selector(rule string, m *yaml.Node) (Selector, error) {
	var s Selector
	if m.Kind != yaml.MappingNode {
		return s, p.errorf(m.Line, "rule %q: match: a mapping (cmdline:, exe:, ...), not a %s", rule, kindName(m))
	}
	err := p.mapping(m, func(k, v *yaml.Node) error {
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			return p.errorf(v.Line, "rule %q: match: %s: one non-empty value", rule, k.Value)
		}
		var err error
		switch k.Value {
		case "cmdline":
			s.Cmdline, err = compile(v.Value)
		case "exe":
			s.Exe, err = compile(v.Value)
		case "cgroup":
			s.Cgroup, err = compile(v.Value)
		case "pidfile":
			if !strings.HasPrefix(v.Value, "/") {
				err = errors.New("an absolute path")
			}
			s.PIDFile = v.Value
		case "container":
			s.Container = strings.ToLower(v.Value)
			if !hexRx.MatchString(s.Container) {
				err = errors.New("a container id: hex digits, the whole id or its beginning")
			}
		case "pod":
			s.Pod = strings.ToLower(strings.ReplaceAll(v.Value, "_", "-"))
			if !podRx.MatchString(s.Pod) {
				err = errors.New("a pod UID (kubectl get pod NAME -o jsonpath='{.metadata.uid}')")
			}
		case "user":
			s.User, s.UID, err = lookupUser(v.Value)
		default:
			return p.errorf(k.Line, "rule %q: match: unknown selector %q; the selectors are cmdline, exe, pidfile, cgroup, container, pod and user", rule, k.Value)
		}
		if err != nil {
			return p.errorf(v.Line, "rule %q: match: %s %q: %v", rule, k.Value, v.Value, err)
		}
		return nil
	})
	if err == nil && s.empty() {
		err = p.errorf(m.Line, "rule %q: match: selects nothing", rule)
	}
	return s, err
}

var (
	hexRx = regexp.MustCompile(`^[0-9a-f]{1,64}$`)
	podRx = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

// compile compiles a pattern that must match somewhere in the string
// (as grep does); anchor it with ^ and $ to match the whole.
func compile(expr string) (*regexp.Regexp, error) {
	rx, err := regexp.Compile(expr)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "error parsing regexp: "))
	}
	return rx, nil
}

// lookupUser resolves a user name or number on the host.
func lookupUser(name string) (string, int, error) {
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return name, n, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return "", 0, errors.New("no such user on this host (a number selects a user only a container knows)")
	}
	uid, err := strconv.Atoi(u.Uid)
	return name, uid, err
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "single value"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}
