package kernelctx

import (
	"bytes"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Membership is one line of /proc/<pid>/cgroup: the process's cgroup in
// one hierarchy.
type Membership struct {
	// ID is the hierarchy's number; 0 is the unified (v2) hierarchy.
	ID int
	// Controllers are the v1 controllers bound to the hierarchy ("cpu",
	// "cpuacct"), or its name ("name=systemd"); empty for v2.
	Controllers []string
	// Path is the cgroup's path from the root of the hierarchy, as the
	// reader's cgroup namespace shows it ("/kubepods/pod.../ctr").
	Path string
}

// V2 reports whether the line is the unified hierarchy's ("0::/path").
func (m Membership) V2() bool { return m.ID == 0 && len(m.Controllers) == 0 }

// Has reports whether controller ctrl is bound to the hierarchy.
func (m Membership) Has(ctrl string) bool {
	for _, c := range m.Controllers {
		if c == ctrl {
			return true
		}
	}
	return false
}

// maxCgroupLines bounds how many hierarchies a cgroup file may list
// (the kernel has 14 v1 controllers, named hierarchies and the unified
// one: a few dozen at most).
const maxCgroupLines = 256

// ParseProcCgroup parses /proc/<pid>/cgroup ("ID:controllers:path" per
// line). Malformed lines are skipped; a file with none valid is an error.
// The path is the rest of the line after the second colon: a cgroup's
// name may hold colons.
func ParseProcCgroup(b []byte) ([]Membership, error) {
	var out []Membership
	seen := map[int]bool{}
	for lines := 0; len(b) > 0 && lines < maxCgroupLines; lines++ {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		id, rest, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		ctrls, p, ok := bytes.Cut(rest, []byte{':'})
		if !ok || len(p) == 0 || p[0] != '/' {
			continue
		}
		n, err := strconv.Atoi(string(id))
		if err != nil || n < 0 || seen[n] {
			// A cgroup's name may hold a newline (the kernel prints
			// it raw): a second line for a hierarchy is the tail of
			// a name, never believed.
			continue
		}
		seen[n] = true
		m := Membership{ID: n, Path: string(p)}
		if len(ctrls) > 0 {
			m.Controllers = strings.Split(string(ctrls), ",")
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cgroup lines")
	}
	return out, nil
}

// Mount is a cgroup file system mounted in the reader's mount namespace.
type Mount struct {
	// Point is where it is mounted ("/sys/fs/cgroup/cpu").
	Point string
	// Root is the cgroup the mount shows at Point, as a path from the
	// hierarchy's root: "/" for a whole hierarchy, deeper for a
	// container's view of its own subtree.
	Root string
	// V2 is set for cgroup2; else Controllers are the v1 controllers
	// (and "name=..." for a named hierarchy) from the super options.
	V2          bool
	Controllers []string
}

// v1Controllers are the super options of a v1 cgroup mount that are
// controllers rather than mount options.
var v1Controllers = map[string]bool{
	"cpu": true, "cpuacct": true, "cpuset": true, "memory": true, "devices": true,
	"freezer": true, "net_cls": true, "blkio": true, "perf_event": true,
	"net_prio": true, "hugetlb": true, "pids": true, "rdma": true, "misc": true,
}

// maxMountLines bounds the mountinfo lines read (a host with many
// containers has thousands of mounts; far fewer are cgroup mounts).
const maxMountLines = 1 << 16

// ParseMountinfo returns the cgroup and cgroup2 mounts of a mountinfo file
// (proc.rst 3.5: "ID parent major:minor root point options [optional...] -
// type source super-options"). Other mounts and malformed lines are
// skipped.
func ParseMountinfo(b []byte) []Mount {
	var out []Mount
	for n := 0; len(b) > 0 && n < maxMountLines; n++ {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		if m, ok := parseMountLine(line); ok {
			out = append(out, m)
		}
	}
	return out
}

func parseMountLine(line []byte) (Mount, bool) {
	pre, post, ok := bytes.Cut(line, []byte(" - "))
	if !ok {
		return Mount{}, false
	}
	f := bytes.Fields(pre)
	g := bytes.Fields(post)
	if len(f) < 6 || len(g) < 3 {
		return Mount{}, false
	}
	m := Mount{Root: unescapeMount(f[3]), Point: unescapeMount(f[4])}
	switch string(g[0]) {
	case "cgroup2":
		m.V2 = true
	case "cgroup":
		for _, o := range strings.Split(string(g[2]), ",") {
			if v1Controllers[o] || strings.HasPrefix(o, "name=") {
				m.Controllers = append(m.Controllers, o)
			}
		}
		if len(m.Controllers) == 0 {
			return Mount{}, false
		}
	default:
		return Mount{}, false
	}
	if !strings.HasPrefix(m.Root, "/") || !strings.HasPrefix(m.Point, "/") {
		return Mount{}, false
	}
	return m, true
}

// unescapeMount undoes the octal escapes mountinfo writes for space, tab,
// newline and backslash (\040, \011, \012, \134).
func unescapeMount(b []byte) string {
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b)
	}
	var s strings.Builder
	for i := 0; i < len(b); i++ {
		if b[i] == '\\' && i+3 < len(b) && isOctal(b[i+1]) && isOctal(b[i+2]) && isOctal(b[i+3]) {
			s.WriteByte((b[i+1]-'0')<<6 | (b[i+2]-'0')<<3 | (b[i+3] - '0'))
			i += 3
			continue
		}
		s.WriteByte(b[i])
	}
	return s.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// Dir is where a cgroup's files are, on a mount that shows it.
type Dir struct {
	// Path is the cgroup's path from its hierarchy's root.
	Path string
	// FS is the directory in the reader's file system.
	FS string
	// Mount is the mount it was found on.
	Mount Mount
}

// Locate finds the directory of cgroup m on one of mounts: a v2 cgroup on
// a cgroup2 mount, a v1 cgroup on the mount of a hierarchy with the same
// controllers. ok is false when no mount shows it (the hierarchy is not
// mounted here, or the mount shows a subtree the cgroup is not in).
func Locate(m Membership, mounts []Mount) (Dir, bool) {
	for _, mt := range mounts {
		if mt.V2 != m.V2() || (!mt.V2 && !sameSet(mt.Controllers, m.Controllers)) {
			continue
		}
		if escapes(m.Path) {
			// "/../..": outside the reader's cgroup namespace.
			return Dir{}, false
		}
		rel, ok := under(m.Path, mt.Root)
		if !ok {
			continue
		}
		mt.Root = path.Clean(mt.Root)
		return Dir{Path: path.Clean(m.Path), FS: path.Join(mt.Point, rel), Mount: mt}, true
	}
	return Dir{}, false
}

// Parent is the cgroup above d on the same mount; ok is false at the
// mount's root (the cgroups above it are not visible here).
func (d Dir) Parent() (Dir, bool) {
	if d.Path == d.Mount.Root || d.Path == "/" {
		return Dir{}, false
	}
	p := Dir{Path: path.Dir(d.Path), FS: path.Dir(d.FS), Mount: d.Mount}
	if _, ok := under(p.Path, d.Mount.Root); !ok {
		return Dir{}, false
	}
	return p, true
}

// escapes reports whether p has a ".." element: the kernel shows a
// cgroup outside the reader's cgroup namespace that way, and no mount
// here shows it.
func escapes(p string) bool {
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return true
		}
	}
	return false
}

// under returns p relative to root when p is root or below it.
func under(p, root string) (string, bool) {
	p, root = path.Clean(p), path.Clean(root)
	if root == "/" {
		return strings.TrimPrefix(p, "/"), true
	}
	if p == root {
		return "", true
	}
	if rest, ok := strings.CutPrefix(p, root+"/"); ok {
		return rest, true
	}
	return "", false
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			if x == y {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
