package textfmt

import (
	"fmt"
	"path"
	"strconv"

	"github.com/stallwatch/stallwatch/model"
)

// LineText prints one line of a location: "func (file:line)".
func LineText(ln model.Line) string {
	name := ln.Function
	if name == "" {
		name = ln.SystemName
	}
	if name == "" {
		name = "?"
	}
	name = Clean(name)
	if ln.File != "" && ln.Line > 0 {
		return fmt.Sprintf("%s (%s:%d)", name, Clean(path.Base(ln.File)), ln.Line)
	}
	return name
}

// TopFrame is the frame that says most about where a thread is: a Java
// thread's innermost Java frame; its first user frame in the program's
// own code, past libc's and the Go runtime's wrappers; else its first
// user frame; else the kernel's wait function.
func TopFrame(t *model.Thread) string {
	for _, l := range t.User {
		if l != nil && len(l.Lines) > 0 && l.Mapping != nil && l.Mapping.File == model.JavaMapping {
			return LineText(l.Lines[0]) // a Java thread's innermost Java frame
		}
	}
	first := ""
	for _, l := range t.User {
		if l == nil || len(l.Lines) == 0 {
			continue
		}
		mod := ""
		if l.Mapping != nil {
			mod = path.Base(l.Mapping.File)
		}
		for _, ln := range l.Lines {
			if !SystemCode(mod, ln.Function) {
				return LineText(ln)
			}
		}
		if first == "" {
			first = LineText(l.Lines[0])
		}
	}
	if first != "" {
		return first
	}
	for _, l := range t.Kernel {
		if l != nil && len(l.Lines) > 0 {
			return "[k] " + Clean(l.Lines[0].Function)
		}
	}
	if t.Wchan != "" {
		return "[k] " + Clean(t.Wchan)
	}
	return "-"
}

// ThreadLabel names a thread in a sentence: `tid 12 "worker"`, or `tid 12`
// when its name is not known (t nil: not in the snapshot).
func ThreadLabel(tid int, t *model.Thread) string {
	if t != nil && t.Name != "" {
		return fmt.Sprintf("tid %d %s", tid, Quoted(t.Name))
	}
	return fmt.Sprintf("tid %d", tid)
}

// Doing says in a few words what a thread is doing: where it sleeps, or
// that it runs.
func Doing(t *model.Thread) string {
	switch {
	case t == nil:
		return "not in the snapshot"
	case t.Syscall != nil:
		return "blocked in " + Clean(SyscallText(t.Syscall))
	case t.Wchan != "":
		return "sleeping in " + Clean(t.Wchan)
	case t.State == 'R':
		return "running"
	}
	return model.StateName(t.State)
}

// SyscallText is a system call as the snapshot describes it, else by its
// name or number.
func SyscallText(sc *model.Syscall) string {
	if sc.Desc != "" {
		return sc.Desc
	}
	if sc.Name != "" {
		return sc.Name + "()"
	}
	return "syscall " + strconv.Itoa(sc.Nr)
}
