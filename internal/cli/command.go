package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Command is one entry of the command table.
type Command struct {
	Name    string
	Summary string // one line, lower case, no period: what it is for
	// Usage is the synopsis after the command's path:
	// "-p PID [--duration DUR] [flags]".
	Usage string
	// Help is the description: paragraphs, with examples indented by two
	// spaces. It is printed as written, under the usage line.
	Help string
	// Flags declares the command's flags into the set; each Run gets a
	// freshly declared set, so the values it binds start at their defaults.
	Flags func(*FlagSet)
	// Args says what the positional arguments complete to.
	Args Completion
	// Run does the work. Nil for a command made of subcommands.
	Run func(ctx context.Context, inv *Invocation) error
	// Commands are the subcommands ("jit inspect").
	Commands []*Command
}

// Find returns the subcommand named name.
func (c *Command) Find(name string) *Command {
	for _, s := range c.Commands {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Invocation is one run of a command.
type Invocation struct {
	// Path is the command's full name: "stallwatch jit inspect".
	Path string
	// Args are the positional arguments before "--"; Rest those after it
	// (Dashed tells whether "--" was given at all).
	Args   []string
	Rest   []string
	Dashed bool
	Flags  *FlagSet
	Stdout io.Writer
	Stderr io.Writer
}

// Positional returns every positional argument, before and after "--".
func (inv *Invocation) Positional() []string {
	return append(slices.Clip(inv.Args), inv.Rest...)
}

// App is the program: its command table and what its top-level help says.
type App struct {
	Name    string // "stallwatch"
	Summary string // for the man page's NAME line
	// Help is the top-level description, before the list of commands.
	Help string
	// Footer follows the list of commands in the top-level help (exit
	// codes, where to read more).
	Footer string
	// Sections are extra man page sections (ENVIRONMENT, FILES), title
	// first, then text as in Help.
	Sections [][2]string
	Version  func() string
	Commands []*Command
	// Global declares the flags every command takes (--log-format),
	// after its own.
	Global func(*FlagSet)
}

// commonGroup lists the flags every command takes, with --help.
const commonGroup = "Common"

// FlagSet returns the flags of command c, its own and the global ones,
// declared afresh.
func (a *App) FlagSet(c *Command) *FlagSet {
	fs := NewFlagSet()
	if c.Flags != nil {
		c.Flags(fs)
	}
	if a.Global != nil {
		fs.Group(commonGroup)
		a.Global(fs)
	}
	for _, f := range fs.flags {
		fs.alias(f)
	}
	return fs
}

// CommandError is an error of the command named by Path.
type CommandError struct {
	Path string // "stallwatch watch"
	Err  error
}

func (e *CommandError) Error() string { return e.Path + ": " + e.Err.Error() }
func (e *CommandError) Unwrap() error { return e.Err }

// WriteError prints err as a user reads it: the command, the message, and
// for a usage error where to find the command's help.
func WriteError(w io.Writer, err error) {
	var ue UsageError
	isUsage := errors.As(err, &ue)
	if isUsage && ue.Shown {
		return
	}
	fmt.Fprintln(w, err.Error())
	var ce *CommandError
	if isUsage && errors.As(err, &ce) {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", ce.Path)
	}
}

// Run runs the command args name. Help asked for (-h, --help, help CMD)
// goes to stdout; a command line that cannot run is a UsageError, with
// the top-level usage on stderr when no command was given at all. Errors
// are wrapped in a *CommandError naming the command.
func (a *App) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		a.WriteUsage(stderr)
		return &CommandError{a.Name, UsageError{Msg: "no command given", Shown: true}}
	}
	switch args[0] {
	case "-h", "--help", "-help":
		a.WriteUsage(stdout)
		return nil
	case "-v", "--version", "-version":
		a.writeVersion(stdout)
		return nil
	}
	if strings.HasPrefix(args[0], "-") {
		return &CommandError{a.Name, UsageErrorf("unknown flag %s: a command comes first (stallwatch COMMAND [flags])", args[0])}
	}
	c := a.find(args[0])
	if c == nil {
		return &CommandError{a.Name, UsageError{Msg: a.unknownCommand(args[0], a.Commands)}}
	}
	return a.run(ctx, []*Command{c}, args[1:], stdout, stderr)
}

func (a *App) find(name string) *Command {
	for _, c := range a.Commands {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Lookup finds a command by its path below the program ("jit", "inspect").
func (a *App) Lookup(path ...string) ([]*Command, error) {
	var cs []*Command
	list := a.Commands
	for _, name := range path {
		var c *Command
		for _, x := range list {
			if x.Name == name {
				c = x
			}
		}
		if c == nil {
			return nil, UsageError{Msg: a.unknownCommand(name, list)}
		}
		cs = append(cs, c)
		list = c.Commands
	}
	return cs, nil
}

func (a *App) unknownCommand(name string, list []*Command) string {
	msg := fmt.Sprintf("unknown command %q", name)
	names := make([]string, len(list))
	for i, c := range list {
		names[i] = c.Name
		if editDistance(name, c.Name) <= 2 {
			msg += fmt.Sprintf(" (did you mean %q?)", c.Name)
		}
	}
	return msg + "; the commands are " + strings.Join(names, ", ")
}

// pathName is "stallwatch jit inspect".
func (a *App) pathName(path []*Command) string {
	parts := []string{a.Name}
	for _, c := range path {
		parts = append(parts, c.Name)
	}
	return strings.Join(parts, " ")
}

func (a *App) run(ctx context.Context, path []*Command, args []string, stdout, stderr io.Writer) error {
	c := path[len(path)-1]
	name := a.pathName(path)
	if len(c.Commands) > 0 {
		if len(args) == 0 {
			return &CommandError{name, UsageErrorf("a command is needed: %s", commandNames(c.Commands))}
		}
		switch args[0] {
		case "-h", "--help", "-help", "help":
			a.WriteHelp(stdout, path)
			return nil
		}
		sub := c.Find(args[0])
		if sub == nil {
			return &CommandError{name, UsageError{Msg: a.unknownCommand(args[0], c.Commands)}}
		}
		return a.run(ctx, append(path, sub), args[1:], stdout, stderr)
	}
	fs := a.FlagSet(c)
	p, err := fs.parse(args)
	if errors.Is(err, errHelp) {
		a.WriteHelp(stdout, path)
		return nil
	}
	if err != nil {
		return &CommandError{name, err}
	}
	inv := &Invocation{Path: name, Args: p.args, Rest: p.rest, Dashed: p.dashed, Flags: fs, Stdout: stdout, Stderr: stderr}
	if err := c.Run(ctx, inv); err != nil {
		return &CommandError{name, err}
	}
	return nil
}

func commandNames(cs []*Command) string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

func (a *App) writeVersion(w io.Writer) {
	v := "dev"
	if a.Version != nil {
		v = a.Version()
	}
	fmt.Fprintf(w, "%s %s\n", a.Name, v)
}

// VersionCommand is `version`: what --version and -v print.
func (a *App) VersionCommand() *Command {
	return &Command{
		Name:    "version",
		Summary: "print the version (also --version, -v)",
		Usage:   "",
		Help:    "Prints the version, the Go version it was built with and the platform.",
		Run: func(ctx context.Context, inv *Invocation) error {
			if len(inv.Positional()) > 0 {
				return UsageErrorf("version takes no arguments")
			}
			a.writeVersion(inv.Stdout)
			return nil
		},
	}
}

// HelpCommand is `help [COMMAND...]`.
func (a *App) HelpCommand() *Command {
	return &Command{
		Name:    "help",
		Summary: "show the help of a command (also COMMAND --help)",
		Usage:   "[COMMAND [SUBCOMMAND]]",
		Help:    "Prints the help of a command, or without one the list of commands.",
		Args:    Completion{Kind: completeCommandName},
		Run: func(ctx context.Context, inv *Invocation) error {
			names := inv.Positional()
			if len(names) == 0 {
				a.WriteUsage(inv.Stdout)
				return nil
			}
			path, err := a.Lookup(names...)
			if err != nil {
				return err
			}
			a.WriteHelp(inv.Stdout, path)
			return nil
		},
	}
}

// completeCommandName completes to the program's command names (help's
// argument); only this package makes it.
const completeCommandName CompletionKind = -1
