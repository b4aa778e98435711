package perms

import (
	"fmt"
	"os"
	"strings"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Self is what stallwatch's own process is allowed, from the kernel's
// own account of it: whether to tell a user to grant a capability, or to
// say why having it was not enough.
type Self struct {
	Root bool          // effective uid 0
	Eff  procfs.CapSet // the effective capabilities
	Bnd  procfs.CapSet // the bounding set: what can ever be had
	// HostUserNS is false in a user namespace of its own (a rootless
	// container's): its capabilities reach only that namespace's
	// processes and files, not the host's.
	HostUserNS bool
	// Confined is the security module's label when it confines the
	// process (SELinux, AppArmor; /proc/self/attr/current), else "".
	Confined string
	// Seccomp: a seccomp filter decides which system calls it may make.
	Seccomp bool
	// NoPtrace: Yama's kernel.yama.ptrace_scope is 3, which lets no
	// process trace another, whatever it holds, until reboot.
	NoPtrace bool
}

// ReadSelf reads Self from /proc/self.
func ReadSelf() Self {
	s := Self{Root: os.Geteuid() == 0, HostUserNS: true}
	pid := os.Getpid()
	if st, err := procfs.ReadStatus(pid, pid); err == nil {
		s.Eff, s.Bnd, s.Seccomp = st.CapEff, st.CapBnd, st.Seccomp == 2
	}
	if b, err := procfs.ReadLimited("/proc/self/uid_map", 4096); err == nil {
		s.HostUserNS = hostUIDMap(string(b))
	}
	if b, err := procfs.ReadLimited("/proc/self/attr/current", 4096); err == nil {
		s.Confined = confinement(string(b))
	}
	scope, ok := PtraceScope()
	s.NoPtrace = ok && scope == 3
	return s
}

// hostUIDMap reports whether a uid_map is the initial user namespace's:
// every uid mapped to itself.
func hostUIDMap(m string) bool {
	f := strings.Fields(m)
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// confinement is the label of a security module that confines the
// process, "" for none ("unconfined", SELinux's unconfined_t, "kernel").
func confinement(label string) string {
	label = strings.TrimRight(strings.TrimSpace(label), "\x00")
	switch {
	case label == "", label == "unconfined", label == "kernel", strings.Contains(label, ":unconfined_t:"):
		return ""
	}
	return strings.TrimSuffix(label, " (enforce)")
}

// Has reports whether capability c is in effect.
func (s Self) Has(c int) bool { return s.Eff.Has(c) }

// CanGrant reports whether c can be granted to stallwatch (its bounding
// set holds it): setcap on the binary works then; otherwise the container
// or the unit that runs it must allow it first.
func (s Self) CanGrant(c int) bool { return s.Bnd.Has(c) }

// WhyRefused says why the kernel refused what c allows while stallwatch
// holds c (or is root): the facts that are not the user's to grant with
// a capability. The list is never empty: when none of them holds, what
// remains is a security policy stallwatch cannot see.
func (s Self) WhyRefused(c int) string {
	var facts []string
	if s.Root {
		facts = append(facts, "stallwatch runs as root")
	}
	if s.Has(c) {
		facts = append(facts, "holds "+CapName(c))
	}
	if !s.HostUserNS {
		facts = append(facts, "in a user namespace of its own (a rootless container's), whose capabilities do not reach the host's processes and kernel")
	}
	if s.Confined != "" {
		facts = append(facts, fmt.Sprintf("confined by a security module (label %s): its policy must allow this", s.Confined))
	}
	if s.Seccomp {
		facts = append(facts, "under a seccomp filter, which may refuse the system call")
	}
	noPtrace := s.NoPtrace && c == CapSysPtrace
	if noPtrace {
		facts = append(facts, "Yama kernel.yama.ptrace_scope is 3: no process may trace another, whatever it holds, until reboot")
	}
	if s.HostUserNS && s.Confined == "" && !s.Seccomp && !noPtrace {
		facts = append(facts, "so a security policy stallwatch cannot see refused it (a security module without a label, Landlock, lockdown, a container runtime's)")
	}
	return strings.Join(facts, "; ")
}
