package daemon

import (
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
	}
	return true
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
