package cli

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Flag is one declared flag: what parsing, help, the man page and the
// completion scripts know of it.
type Flag struct {
	Name    string // long name, without dashes: "pid"
	Short   string // one letter, or "": "p" (from shortNames)
	Arg     string // the value's name in help ("PID"); "" for a boolean flag
	Usage   string // one sentence, lower case
	Default string // the default as help shows it; "" when there is none to show
	Group   string // the help section it is listed under; "" for the first
	// Repeatable flags collect every value given.
	Repeatable bool
	// Complete says what the value completes to in a shell.
	Complete Completion

	value flag.Value
}

// Completes says what the flag's value completes to in a shell.
func (f *Flag) Completes(c Completion) *Flag {
	f.Complete = c
	return f
}

// Value is the flag's value as a string that Set takes back (the last
// value of a repeatable flag).
func (f *Flag) Value() string {
	if sv, ok := f.value.(*stringsValue); ok {
		if len(*sv) == 0 {
			return ""
		}
		return (*sv)[len(*sv)-1]
	}
	return f.value.String()
}

// IsBool reports whether the flag takes no value.
func (f *Flag) IsBool() bool {
	b, ok := f.value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Completion is what a flag's value or a positional argument completes to.
type Completion struct {
	Kind  CompletionKind
	Words []string // for CompleteWords
}

// CompletionKind is a kind of value a shell can offer.
type CompletionKind int

// The kinds of completion.
const (
	CompleteNothing CompletionKind = iota // no suggestions (a number, a duration)
	CompleteFile                          // a path
	CompleteDir                           // a directory
	CompletePID                           // a running process's id
	CompleteCommand                       // a program, then its arguments as paths
	CompleteWords                         // one of Words
)

// Words completes to one of a fixed set of words.
func Words(w ...string) Completion { return Completion{Kind: CompleteWords, Words: w} }

// Complete* are the completions without words.
var (
	File    = Completion{Kind: CompleteFile}
	Dir     = Completion{Kind: CompleteDir}
	PID     = Completion{Kind: CompletePID}
	Program = Completion{Kind: CompleteCommand}
)

// FlagSet declares and parses the flags of one command.
type FlagSet struct {
	flags   []*Flag
	byName  map[string]*Flag // long and short names
	group   string
	changed map[string]bool
}

// NewFlagSet returns an empty flag set.
func NewFlagSet() *FlagSet {
	return &FlagSet{byName: map[string]*Flag{}, changed: map[string]bool{}}
}

// Group lists the flags declared after it under title in help ("Capture").
func (s *FlagSet) Group(title string) { s.group = title }

// Flags returns the flags in the order they were declared.
func (s *FlagSet) Flags() []*Flag { return s.flags }

// Lookup finds a flag by its long or short name.
func (s *FlagSet) Lookup(name string) *Flag { return s.byName[name] }

// Changed reports whether the flag named name was given on the command line.
func (s *FlagSet) Changed(name string) bool { return s.changed[name] }

// Set sets the flag named name (its long name) as if it were given on the
// command line with value: a configuration file's setting of the same
// name. A repeatable flag collects every call's value.
func (s *FlagSet) Set(name, value string) error {
	f := s.byName[name]
	if f == nil || f.Name != name {
		msg := fmt.Sprintf("unknown setting %q", name)
		if near := s.nearest(name); near != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", near)
		}
		return UsageError{Msg: msg}
	}
	if err := f.value.Set(value); err != nil {
		return UsageErrorf("%q: %v", value, err)
	}
	s.changed[f.Name] = true
	return nil
}

// Var declares a flag of any flag.Value. usage may name the value in
// backquotes, as package flag's usage strings do: "write under `DIR`".
func (s *FlagSet) Var(v flag.Value, name, usage string) *Flag {
	if _, dup := s.byName[name]; dup {
		panic("cli: flag --" + name + " declared twice")
	}
	arg, text := unquoteUsage(usage)
	f := &Flag{Name: name, Short: shortNames[name], Usage: text, Group: s.group, value: v}
	if !f.IsBool() {
		f.Arg = arg
		if f.Arg == "" {
			f.Arg = "VALUE"
		}
	}
	s.flags = append(s.flags, f)
	s.byName[name] = f
	return f
}

// Bool declares a flag that is false unless given.
func (s *FlagSet) Bool(p *bool, name, usage string) *Flag {
	*p = false
	return s.Var((*boolValue)(p), name, usage)
}

// Int declares an integer flag.
func (s *FlagSet) Int(p *int, name string, def int, usage string) *Flag {
	*p = def
	f := s.Var((*intValue)(p), name, orArg(usage, "N"))
	if def != 0 {
		f.Default = strconv.Itoa(def)
	}
	return f
}

// Uint64 declares an unsigned integer flag.
func (s *FlagSet) Uint64(p *uint64, name string, def uint64, usage string) *Flag {
	*p = def
	f := s.Var((*uint64Value)(p), name, orArg(usage, "N"))
	if def != 0 {
		f.Default = strconv.FormatUint(def, 10)
	}
	return f
}

// String declares a string flag.
func (s *FlagSet) String(p *string, name, def, usage string) *Flag {
	*p = def
	f := s.Var((*stringValue)(p), name, usage)
	f.Default = def
	return f
}

// Duration declares a duration flag ("500ms", "2m").
func (s *FlagSet) Duration(p *time.Duration, name string, def time.Duration, usage string) *Flag {
	*p = def
	f := s.Var((*durationValue)(p), name, orArg(usage, "DUR"))
	if def != 0 {
		f.Default = FormatDuration(def)
	}
	return f
}

// Choice declares a string flag whose value must be one of choices; the
// choices are also what it completes to.
func (s *FlagSet) Choice(p *string, name, def string, choices []string, usage string) *Flag {
	*p = def
	f := s.Var(&choiceValue{p: p, choices: choices}, name, usage)
	f.Default = def
	f.Complete = Words(choices...)
	return f
}

// Strings declares a flag that may be given many times; each value is
// appended.
func (s *FlagSet) Strings(p *[]string, name, usage string) *Flag {
	*p = nil
	f := s.Var((*stringsValue)(p), name, usage)
	f.Repeatable = true
	return f
}

func (s *FlagSet) alias(f *Flag) {
	if f.Short == "" {
		return
	}
	if g, dup := s.byName[f.Short]; dup && g != f {
		panic("cli: short flag -" + f.Short + " declared twice")
	}
	s.byName[f.Short] = f
}

// orArg names the value when the usage does not.
func orArg(usage, arg string) string {
	if strings.Contains(usage, "`") {
		return usage
	}
	return usage + "\x00" + arg
}

// unquoteUsage takes the value's name out of usage: the first word in
// backquotes (the backquotes are dropped from the text), or a name
// appended by orArg.
func unquoteUsage(usage string) (arg, text string) {
	if u, a, ok := strings.Cut(usage, "\x00"); ok {
		return a, u
	}
	i := strings.IndexByte(usage, '`')
	if i < 0 {
		return "", usage
	}
	j := strings.IndexByte(usage[i+1:], '`')
	if j < 0 {
		return "", usage
	}
	arg = usage[i+1 : i+1+j]
	return arg, usage[:i] + arg + usage[i+1+j+1:]
}

// parsed is what Parse found besides the flags.
type parsed struct {
	args   []string // positional arguments before "--"
	rest   []string // after "--"
	dashed bool     // "--" was given
}

// errHelp is -h or --help.
var errHelp = errors.New("help requested")

// Parse sets the flags in args. Flags may come before, between and after
// positional arguments; "--" ends them. A flag is --name, --name=value,
// --name value, -x for its short form, or -name as package flag writes it.
func (s *FlagSet) parse(args []string) (parsed, error) {
	for _, f := range s.flags {
		s.alias(f)
	}
	var p parsed
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			p.dashed, p.rest = true, args[i+1:]
			return p, nil
		case len(a) < 2 || a[0] != '-':
			p.args = append(p.args, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		shown := a
		if hasValue {
			shown = a[:len(a)-len(value)-1]
		}
		if name == "h" || name == "help" {
			return p, errHelp
		}
		f := s.byName[name]
		if f == nil || (name == f.Short && strings.HasPrefix(a, "--")) {
			return p, UsageError{Msg: s.unknown(shown, name)}
		}
		if !hasValue && !f.IsBool() {
			if i+1 == len(args) {
				return p, UsageErrorf("%s needs a value (%s)", shown, f.Arg)
			}
			i++
			value, hasValue = args[i], true
		}
		if !hasValue {
			value = "true"
		}
		if err := f.value.Set(value); err != nil {
			return p, UsageErrorf("%s %q: %v", shown, value, err)
		}
		s.changed[f.Name] = true
	}
	return p, nil
}

// unknown says a flag is not known, suggesting the nearest one.
func (s *FlagSet) unknown(shown, name string) string {
	msg := "unknown flag " + shown
	if best := s.nearest(name); best != "" {
		msg += " (did you mean --" + best + "?)"
	}
	return msg
}

// nearest is the flag name meant by a mistyped name: the only flag the
// name begins, else one at most two edits away, else "".
func (s *FlagSet) nearest(name string) string {
	var prefixed []string
	best, bestD := "", 3
	for _, f := range s.flags {
		if strings.HasPrefix(f.Name, name) {
			prefixed = append(prefixed, f.Name)
		}
		if d := editDistance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	}
	if len(prefixed) == 1 && len(name) >= 2 {
		best = prefixed[0]
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

type boolValue bool

func (b *boolValue) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*b = boolValue(v)
	return nil
}
func (b *boolValue) String() string   { return strconv.FormatBool(bool(*b)) }
func (b *boolValue) IsBoolFlag() bool { return true }

type intValue int

func (n *intValue) Set(s string) error {
	v, err := strconv.ParseInt(s, 0, strconv.IntSize)
	if err != nil {
		return errors.New("not a whole number")
	}
	*n = intValue(v)
	return nil
}
func (n *intValue) String() string { return strconv.Itoa(int(*n)) }

type uint64Value uint64

func (n *uint64Value) Set(s string) error {
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return errors.New("not a whole number ≥ 0")
	}
	*n = uint64Value(v)
	return nil
}
func (n *uint64Value) String() string { return strconv.FormatUint(uint64(*n), 10) }

type stringValue string

func (v *stringValue) Set(s string) error { *v = stringValue(s); return nil }
func (v *stringValue) String() string     { return string(*v) }

type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (500ms, 10s, 2m)")
	}
	*d = durationValue(v)
	return nil
}
func (d *durationValue) String() string { return time.Duration(*d).String() }

type choiceValue struct {
	p       *string
	choices []string
}

func (c *choiceValue) Set(s string) error {
	for _, ch := range c.choices {
		if s == ch {
			*c.p = s
			return nil
		}
	}
	return fmt.Errorf("want %s", orList(c.choices))
}
func (c *choiceValue) String() string { return *c.p }

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// FormatDuration writes d as people write it: 5m rather than 5m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

type stringsValue []string

func (v *stringsValue) Set(s string) error { *v = append(*v, s); return nil }
func (v *stringsValue) String() string     { return strings.Join(*v, ",") }

// UsageError is a command line that cannot be run as given: exit code 2,
// with a pointer to the command's help.
type UsageError struct {
	Msg string
	// Shown: the usage has been printed already; the message adds nothing.
	Shown bool
}

func (e UsageError) Error() string { return e.Msg }

// UsageErrorf formats a UsageError.
func UsageErrorf(format string, args ...any) error {
	return UsageError{Msg: fmt.Sprintf(format, args...)}
}
