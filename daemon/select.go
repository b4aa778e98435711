package daemon

import (
	"path"
	"regexp"
	"strings"

	"github.com/stallwatch/stallwatch/internal/procwatch"
)

// Selector says which processes a rule watches. Every field given must
// match (they are ANDed); patterns match anywhere unless anchored.
type Selector struct {
	Cmdline *regexp.Regexp // the command line, arguments joined by spaces
	Exe     *regexp.Regexp // the executable's path
	Cgroup  *regexp.Regexp // the cgroup path
	// PIDFile names a file holding the pid of the process to watch; it is
	// read again at every scan.
	PIDFile string
	// Container is a container id or its beginning (as docker ps shows
	// 12 digits); Pod a Kubernetes pod's UID. Both come from the cgroup
	// path.
	Container string
	Pod       string
	// User is the effective user, by name (resolved when the
	// configuration is read) or number.
	User string
	UID  int
}

func (s *Selector) empty() bool {
	return s.Cmdline == nil && s.Exe == nil && s.Cgroup == nil && s.PIDFile == "" && s.Container == "" && s.Pod == "" && s.User == ""
}

// ChosenByAnyone reports whether only what the process's own user
// chooses selects it: a command line or an executable's path, without a
// user, a pid file, a cgroup, a container or a pod. Any user can start a
// process that matches (exec -a), have it watched and spend captures.
func (s *Selector) ChosenByAnyone() bool {
	return (s.Cmdline != nil || s.Exe != nil) && s.User == "" && s.PIDFile == "" && s.Cgroup == nil && s.Container == "" && s.Pod == ""
}

// Match reports whether process f is selected. pidfile is the pid the
// selector's PIDFile held at this scan (0 when it could not be read).
func (s *Selector) Match(f *procwatch.Facts, pidfile int) bool {
	switch {
	case s.PIDFile != "" && f.PID != pidfile:
		return false
	case s.User != "" && f.UID != s.UID:
		return false
	case s.Container != "" && !strings.HasPrefix(f.ContainerID, s.Container):
		return false
	case s.Pod != "" && f.PodUID != s.Pod:
		return false
	case s.Cgroup != nil && !s.Cgroup.MatchString(f.Cgroup):
		return false
	case s.Exe != nil && (f.Exe == "" || !s.Exe.MatchString(f.Exe)):
		return false
	case s.Cmdline != nil && (len(f.Cmdline) == 0 || !s.Cmdline.MatchString(f.CommandLine())):
		return false
	case s.Cmdline != nil && s.Exe == nil && WrapperOf(f) != "":
		return false // see WrapperOf
	}
	return true
}

// WrapperOf names the wrapper process f is ("timeout", "sh -c"), or "".
// A wrapper runs another program, named in its arguments: its command
// line holds the program's, but its threads are not the program's, and
// `timeout 90 ./server` watched is a capture of timeout waiting for its
// child. So a rule's cmdline: never selects a wrapper — the program it
// runs is selected by its own command line, as a child (timeout, sudo,
// sh -c, xargs) or as the same process once the wrapper executes it
// (env, nohup, nice: the exec event brings the new command line) — unless
// the rule's exe: names the wrapper itself. Other selectors (pidfile,
// exe alone, cgroup …) select what they name; --check warns of a wrapper
// among what they select.
func WrapperOf(f *procwatch.Facts) string {
	for _, p := range []string{firstArg(f.Cmdline), f.Exe} {
		b := path.Base(p)
		switch {
		case wrappers[b]:
			return b
		case shells[b] && shellCommand(f.Cmdline):
			return b + " -c"
		}
	}
	return ""
}

// wrappers are programs that run the program their arguments name (as a
// child, or by executing it), with a limit, a user, a scheduling class or
// a namespace of their own.
var wrappers = map[string]bool{
	"timeout": true, "sudo": true, "su": true, "doas": true, "runuser": true, "setpriv": true,
	"env": true, "nohup": true, "setsid": true, "xargs": true, "nice": true, "ionice": true,
	"chrt": true, "taskset": true, "numactl": true, "stdbuf": true, "unbuffer": true, "flock": true,
	"prlimit": true, "unshare": true, "nsenter": true, "chroot": true, "time": true, "strace": true,
	"ltrace": true, "catchsegv": true, "watch": true, "systemd-run": true, "start-stop-daemon": true,
}

// shells run a command given with -c.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true}

// shellCommand reports whether a shell's arguments give it a command with
// -c (or a cluster holding c: -ec, -lc) before its first operand.
func shellCommand(args []string) bool {
	for _, a := range args[min(1, len(args)):] {
		if a == "--" || !strings.HasPrefix(a, "-") {
			return false
		}
		if !strings.HasPrefix(a, "--") && strings.ContainsRune(a, 'c') {
			return true
		}
	}
	return false
}

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// String says what the selector selects, for logs.
func (s *Selector) String() string {
	var parts []string
	add := func(k, v string) { parts = append(parts, k+"="+v) }
	if s.Cmdline != nil {
		add("cmdline", s.Cmdline.String())
	}
	if s.Exe != nil {
		add("exe", s.Exe.String())
	}
	if s.PIDFile != "" {
		add("pidfile", s.PIDFile)
	}
	if s.Cgroup != nil {
		add("cgroup", s.Cgroup.String())
	}
	if s.Container != "" {
		add("container", s.Container)
	}
	if s.Pod != "" {
		add("pod", s.Pod)
	}
	if s.User != "" {
		add("user", s.User)
	}
	return strings.Join(parts, " ")
}

// Selection is a process a rule selects now, or a wrapper its cmdline:
// matched and passes over (--check shows both).
type Selection struct {
	Rule    string
	PID     int
	Command string
	// Wrapper is the wrapper the process is (WrapperOf), or "". On a
	// selected process it is a warning: a selector other than cmdline
	// chose a wrapper.
	Wrapper string
}

// SelectNow looks at every process as the daemon would: for each, the
// first rule that selects it (selected), and the wrappers a rule's
// cmdline matched without selecting them (passedOver). self is left out.
func (c *Config) SelectNow(self int) (selected, passedOver []Selection, err error) {
	pids, err := procwatch.List()
	if err != nil {
		return nil, nil, err
	}
	pidfile := make([]int, len(c.Rules))
	for i := range c.Rules {
		pidfile[i] = readPIDFile(c.Rules[i].Select.PIDFile)
	}
	for _, pid := range pids {
		if pid == self {
			continue
		}
		f, err := procwatch.Read(pid)
		if err != nil || len(f.Cmdline) == 0 {
			continue // gone, a zombie or a kernel thread
		}
		sel := Selection{PID: pid, Command: f.CommandLine(), Wrapper: WrapperOf(&f)}
		chosen := false
		for i := range c.Rules {
			r := &c.Rules[i]
			if r.Select.Match(&f, pidfile[i]) {
				sel.Rule, chosen = r.Name, true
				selected = append(selected, sel)
				break
			}
		}
		if chosen || sel.Wrapper == "" {
			continue
		}
		for i := range c.Rules {
			if cl := c.Rules[i].Select.Cmdline; cl != nil && cl.MatchString(sel.Command) {
				sel.Rule = c.Rules[i].Name
				passedOver = append(passedOver, sel)
				break
			}
		}
	}
	return selected, passedOver, nil
}
