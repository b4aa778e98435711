package attach

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// RefusedError says why the JVM is not signalled: what it would do with
// SIGQUIT instead of starting its attach listener.
type RefusedError struct {
	Reason string
}

func (e *RefusedError) Error() string { return "not attaching to the JVM: " + e.Reason }

// sigquit is SIGQUIT's bit in /proc/<pid>/status's signal masks.
const sigquit = uint64(1) << (unix.SIGQUIT - 1)

// checkSignal refuses to send SIGQUIT to a process that would not start
// its attach listener on it: one that does not catch it (its default
// action ends the process: a JVM started with -Xrs), one that ignores it,
// one whose VM reduces its signal use or disables attaching. flags
// reads the VM's own flags (nil when its memory cannot be read); the
// command line and the environment the JVM reads options from are the
// fallback, and a second opinion.
func checkSignal(sigCgt, sigIgn uint64, flags func(string) (bool, error), cmdline []string, env map[string]string) error {
	switch {
	case sigIgn&sigquit != 0:
		return &RefusedError{Reason: "it ignores SIGQUIT, so its attach listener cannot be started"}
	case sigCgt&sigquit == 0:
		return &RefusedError{Reason: "it has no SIGQUIT handler (-Xrs or -XX:+ReduceSignalUsage): the signal would end it"}
	}
	if flags != nil {
		rsu, err1 := flags("ReduceSignalUsage")
		dam, err2 := flags("DisableAttachMechanism")
		switch {
		case err1 == nil && rsu:
			return &RefusedError{Reason: "its -XX:+ReduceSignalUsage (-Xrs) leaves SIGQUIT to the application's own handler"}
		case err2 == nil && dam:
			return &RefusedError{Reason: "its attach mechanism is disabled (-XX:+DisableAttachMechanism): SIGQUIT would print a thread dump to its output"}
		case err1 == nil && err2 == nil:
			return checkOptions(cmdline, env, false)
		}
	}
	return checkOptions(cmdline, env, true)
}

// checkOptions reads the options a JVM was started with from its command
// line and environment: the last -Xrs, -XX:±ReduceSignalUsage and
// -XX:±DisableAttachMechanism win. When sole (the VM's flags could not be
// read), options in a file it did not read (@argfiles, -XX:Flags=,
// -XX:VMOptionsFile=) leave it unsure, and it refuses.
func checkOptions(cmdline []string, env map[string]string, sole bool) error {
	var opts []string
	// JDK_JAVA_OPTIONS goes before the command line's options, the VM's
	// own variables after them (_JAVA_OPTIONS last).
	opts = append(opts, strings.Fields(env["JDK_JAVA_OPTIONS"])...)
	opts = append(opts, launcherOptions(cmdline)...)
	opts = append(opts, strings.Fields(env["JAVA_TOOL_OPTIONS"])...)
	opts = append(opts, strings.Fields(env["_JAVA_OPTIONS"])...)
	rsu, dam := false, false
	var opaque string
	for _, o := range opts {
		switch {
		case o == "-Xrs", o == "-XX:+ReduceSignalUsage":
			rsu = true
		case o == "-XX:-ReduceSignalUsage":
			rsu = false
		case o == "-XX:+DisableAttachMechanism":
			dam = true
		case o == "-XX:-DisableAttachMechanism":
			dam = false
		case strings.HasPrefix(o, "@"), strings.HasPrefix(o, "-XX:Flags="), strings.HasPrefix(o, "-XX:VMOptionsFile="):
			opaque = o
		}
	}
	switch {
	case rsu:
		return &RefusedError{Reason: "it was started with -Xrs (-XX:+ReduceSignalUsage): SIGQUIT is left to the application"}
	case dam:
		return &RefusedError{Reason: "it was started with -XX:+DisableAttachMechanism: SIGQUIT would print a thread dump to its output"}
	case sole && opaque != "":
		return &RefusedError{Reason: fmt.Sprintf("its options include %s, which stallwatch does not read, and its flags could not be read from its memory: "+
			"-XX:+DisableAttachMechanism cannot be ruled out", opaque)}
	}
	return nil
}

// launcherOptions are the options before the main class or -jar on a
// java command line (what follows are the program's arguments).
func launcherOptions(cmdline []string) []string {
	if len(cmdline) < 2 {
		return nil
	}
	var out []string
	args := cmdline[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "@") {
			break // the main class
		}
		out = append(out, a)
		switch a {
		case "-jar", "-m", "--module":
			return out // the program follows
		case "-cp", "-classpath", "--class-path", "-p", "--module-path", "--add-modules", "--source",
			"--add-opens", "--add-exports", "--add-reads", "--patch-module", "--limit-modules", "--upgrade-module-path":
			i++ // its value is the next argument
		}
	}
	return out
}

// ErrNoAnswer is wrapped when the JVM did not answer in time: its attach
// listener did not start, or it did not run the command (a VM stuck at a
// safepoint does neither).
var ErrNoAnswer = errors.New("the JVM did not answer")
