package jit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/safedir"
	"golang.org/x/sys/unix"
)

// WritePerfMap writes the symbols of ix that came from jitdumps as a perf
// map, in the order they were loaded (a reader takes later lines over
// earlier ones, as the JIT reused memory). With display, names are
// DisplayName's; otherwise as the runtime wrote them, which is what the
// runtime's own perf map would say. It returns the lines written.
func WritePerfMap(w io.Writer, ix *Index, display bool) (int, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	n := 0
	var line []byte
	for s := range ix.layer(layerJitdump) {
		name := s.Name
		if display {
			name = s.Display
		}
		line = strconv.AppendUint(line[:0], s.Start, 16)
		line = append(line, ' ')
		line = strconv.AppendUint(line, s.Size, 16)
		line = append(line, ' ')
		line = appendMapName(line, name)
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return n, err
		}
		n++
	}
	return n, bw.Flush()
}

// appendMapName appends name with line breaks and other control bytes
// replaced: a name from the target must not add lines of its own.
func appendMapName(b []byte, name string) []byte {
	if name == "" {
		return append(b, '?')
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c < 0x20 || c == 0x7f {
			c = ' '
		}
		b = append(b, c)
	}
	return b
}

// MapFile is a perf map stallwatch writes for a process: written whole to
// a temporary file in the same directory, then renamed over the old one,
// so readers never see half of it; owned by the target's user, as perf
// requires of the maps it trusts. Every step is relative to the directory
// descriptor opened once (internal/safedir): a link planted in the target's
// /tmp is replaced, never followed.
type MapFile struct {
	// Path is the file as the user should read it: in the target's mount
	// namespace for the default place.
	Path     string
	dir      *safedir.Dir // the directory, opened in the target's root
	base     string
	uid, gid int
}

// OpenMapFile prepares the perf map of pid: /tmp/perf-<nspid>.map inside
// the target's root when path is "", else path in our own file system,
// whose directory must not be writable by other users (safedir.Open).
// It refuses to take over a perf map the target writes itself.
func OpenMapFile(pid int, path string) (*MapFile, error) {
	st, err := procfs.ReadStatus(pid, pid)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	m := &MapFile{uid: int(st.Uid[1]), gid: int(st.Gid[1])}
	if path == "" {
		m.Path = fmt.Sprintf("/tmp/perf-%d.map", st.InnerPid())
		m.dir, err = openTargetTmp(pid)
		if err == nil && writesItself(pid, m.Path) {
			m.dir.Close()
			return nil, fmt.Errorf("pid %d writes %s itself (--perf-basic-prof or the like): give another path with -o", pid, m.Path)
		}
	} else {
		m.Path = path
		m.dir, err = safedir.Open(filepath.Dir(path))
	}
	if err != nil {
		return nil, fmt.Errorf("perf map for pid %d: %w", pid, err)
	}
	m.base = filepath.Base(m.Path)
	return m, nil
}

// openTargetTmp opens the target's /tmp. It is shared with the target's
// user by design (perf maps live there), so it is not held to safedir's
// ownership rule; writing relative to it with O_NOFOLLOW is what keeps a
// planted link from redirecting us.
func openTargetTmp(pid int) (*safedir.Dir, error) {
	f, err := procfs.OpenInRoot(pid, "/tmp", false)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return safedir.Wrap(f, f.Name())
}

// writesItself reports whether the process holds name (in its root)
// open: then the map is the runtime's own. Files are compared by inode,
// which holds across mount namespaces and chroots.
func writesItself(pid int, name string) bool {
	f, err := procfs.OpenInRoot(pid, name, true)
	if err != nil {
		return false
	}
	fi, err := f.Stat()
	f.Close()
	if err != nil {
		return false
	}
	fds, err := os.ReadDir(procfs.PidPath(pid, "fd"))
	if err != nil {
		return false
	}
	for _, e := range fds {
		if st, err := os.Stat(procfs.PidPath(pid, "fd", e.Name())); err == nil && os.SameFile(fi, st) {
			return true
		}
	}
	return false
}

// Write replaces the perf map with the jitdump symbols of ix and returns
// how many lines it wrote.
func (m *MapFile) Write(ix *Index, display bool) (int, error) {
	// A name with our pid: a stallwatch killed mid-write leaves one
	// temporary file per pid, not one per write.
	f, err := m.dir.CreateTemp(fmt.Sprintf(".%s.%d-*.tmp", m.base, os.Getpid()))
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", m.Path, err)
	}
	n, err := WritePerfMap(f, ix, display)
	if err == nil {
		// perf trusts a map owned by the user it runs as or root: give it
		// to the target's user. Not being allowed to (not root) leaves it
		// ours, which is the target's user when we run as that user.
		if cerr := f.Chown(m.uid, m.gid); cerr != nil && !errors.Is(cerr, unix.EPERM) {
			err = cerr
		}
	}
	if err == nil {
		err = f.Commit(m.base, 0o644)
	} else {
		f.Abort()
	}
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", m.Path, err)
	}
	return n, nil
}

// Close releases the directory.
func (m *MapFile) Close() error { return m.dir.Close() }
