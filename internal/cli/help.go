package cli

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// helpWidth is the width help is wrapped to.
const helpWidth = 80

// WriteUsage writes the top-level help: what the program does, its
// commands, and the footer.
func (a *App) WriteUsage(w io.Writer) {
	var b strings.Builder
	if a.Help != "" {
		b.WriteString(strings.TrimSpace(a.Help) + "\n\n")
	}
	fmt.Fprintf(&b, "Usage:\n  %s COMMAND [flags] [arguments]\n\nCommands:\n", a.Name)
	writeCommandList(&b, a.Commands)
	fmt.Fprintf(&b, "\nRun '%s help COMMAND' or '%s COMMAND --help' for a command's flags.\n", a.Name, a.Name)
	if a.Footer != "" {
		b.WriteString("\n" + strings.TrimSpace(a.Footer) + "\n")
	}
	io.WriteString(w, b.String())
}

func writeCommandList(b *strings.Builder, cs []*Command) {
	width := 0
	for _, c := range cs {
		width = max(width, len(c.Name))
	}
	for _, c := range cs {
		writeColumns(b, "  "+c.Name, c.Summary, width+4)
	}
}

// Synopsis is the usage line of the command at path: "stallwatch record
// -p PID [flags]".
func (a *App) Synopsis(path []*Command) string {
	c := path[len(path)-1]
	s := a.pathName(path)
	switch {
	case len(c.Commands) > 0:
		s += " COMMAND [flags]"
	case c.Usage != "":
		s += " " + c.Usage
	}
	return s
}

// WriteHelp writes the help of the command at path: its usage line, its
// description, its subcommands or its flags by group.
func (a *App) WriteHelp(w io.Writer, path []*Command) {
	c := path[len(path)-1]
	var b strings.Builder
	fmt.Fprintf(&b, "Usage: %s\n", a.Synopsis(path))
	if c.Help != "" {
		b.WriteString("\n" + strings.Trim(c.Help, "\n") + "\n")
	} else {
		b.WriteString("\n" + upperFirst(c.Summary) + ".\n")
	}
	if len(c.Commands) > 0 {
		b.WriteString("\nCommands:\n")
		writeCommandList(&b, c.Commands)
		fmt.Fprintf(&b, "\nRun '%s COMMAND --help' for a command's flags.\n", a.pathName(path))
		io.WriteString(w, b.String())
		return
	}
	fs := a.FlagSet(c)
	col := flagColumn(fs.flags)
	gs := groups(fs.flags)
	if len(gs) == 0 || gs[len(gs)-1].title != commonGroup {
		gs = append(gs, group{title: commonGroup})
	}
	for _, g := range gs {
		title := "Flags"
		if g.title != "" {
			title = g.title + " flags"
		}
		fmt.Fprintf(&b, "\n%s:\n", title)
		for _, f := range g.flags {
			writeColumns(&b, "  "+FlagSpec(f), FlagText(f), col)
		}
	}
	writeColumns(&b, "  -h, --help", "show this help", col)
	io.WriteString(w, b.String())
}

// flagColumn is where the descriptions of flags start: after the widest
// flag, within limits; a flag wider than that has its line to itself.
func flagColumn(flags []*Flag) int {
	col := 16
	for _, f := range flags {
		col = max(col, len(FlagSpec(f))+4)
	}
	return min(col, 32)
}

// FlagSpec is how help writes a flag: "-p, --pid PID" or "    --out DIR".
func FlagSpec(f *Flag) string {
	s := "    --" + f.Name
	if f.Short != "" {
		s = "-" + f.Short + ", --" + f.Name
	}
	if f.Arg != "" {
		s += " " + f.Arg
	}
	return s
}

// FlagText is a flag's description with its default and repeatability.
func FlagText(f *Flag) string {
	s := f.Usage
	if f.Default != "" {
		s += " (default " + f.Default + ")"
	}
	if f.Repeatable {
		s += " (repeatable)"
	}
	return s
}

type group struct {
	title string
	flags []*Flag
}

// groups orders flags by group, in the order each group first appears.
func groups(flags []*Flag) []group {
	var gs []group
	at := map[string]int{}
	for _, f := range flags {
		i, ok := at[f.Group]
		if !ok {
			i = len(gs)
			at[f.Group] = i
			gs = append(gs, group{title: f.Group})
		}
		gs[i].flags = append(gs[i].flags, f)
	}
	return gs
}

// writeColumns writes left, then text starting at column col and wrapped
// at helpWidth; a left part too wide for the column gets a line of its own.
func writeColumns(b *strings.Builder, left, text string, col int) {
	b.WriteString(left)
	n := utf8.RuneCountInString(left)
	if n+2 > col {
		b.WriteString("\n")
		n = 0
	}
	b.WriteString(strings.Repeat(" ", col-n))
	for i, line := range wrap(text, helpWidth-col) {
		if i > 0 {
			b.WriteString("\n" + strings.Repeat(" ", col))
		}
		b.WriteString(line)
	}
	b.WriteString("\n")
}

// wrap breaks text into lines of at most width runes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > width:
			lines = append(lines, line)
			line = word
		default:
			line += " " + word
		}
	}
	return append(lines, line)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
