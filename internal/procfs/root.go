package procfs

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// OpenInRoot opens name, an absolute path in the target's mount namespace,
// through /proc/<pid>/root for reading. Symbolic links are resolved inside
// the target's root, as the target itself would resolve them: a link to
// /etc/shadow in a container names the container's file, never the host's.
// Magic links (/proc/<n>/fd/<m>) are refused. With noFollowFinal, a symlink
// as the last component is refused too (ELOOP), which is what callers want
// for files a less privileged target could point anywhere.
//
// Relative names are resolved against the target's working directory.
func OpenInRoot(pid int, name string, noFollowFinal bool) (*os.File, error) {
	if !strings.HasPrefix(name, "/") {
		cwd, err := CwdInRoot(pid)
		if err != nil {
			return nil, fmt.Errorf("open %s in root of pid %d: %w", name, pid, err)
		}
		name = path.Join(cwd, name)
	}
	rootPath := PidPath(pid, "root")
	root, err := os.Open(rootPath)
	if err != nil {
		return nil, wrapGone(fmt.Errorf("open %s: %w", rootPath, err))
	}
	defer root.Close()
	rel := strings.TrimLeft(path.Clean(name), "/")
	if rel == "" {
		rel = "."
	}
	flags := uint64(unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK)
	if noFollowFinal {
		flags |= unix.O_NOFOLLOW
	}
	fd, err := -1, unix.ENOSYS
	if !forceSlowOpen {
		fd, err = unix.Openat2(int(root.Fd()), rel, &unix.OpenHow{
			Flags:   flags,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
		})
	}
	if errors.Is(err, unix.ENOSYS) {
		// Kernels before 5.6 have no openat2: resolve in user space
		// with the same rule.
		fd, err = openInRootSlow(int(root.Fd()), rel, noFollowFinal)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s in root of pid %d: %w", name, pid, err)
	}
	// O_NONBLOCK keeps a FIFO planted by the target from blocking us in
	// open; regular files ignore it.
	return os.NewFile(uintptr(fd), path.Join(rootPath, rel)), nil
}

// forceSlowOpen makes tests exercise the pre-openat2 path.
var forceSlowOpen = false

// openInRootSlow walks rel one component at a time from the directory fd
// root, resolving symlinks itself so that absolute targets and ".." stay
// inside root.
func openInRootSlow(root int, rel string, noFollowFinal bool) (int, error) {
	const maxLinks = 40
	links := 0
	parts := strings.Split(rel, "/")
	stack := []int{} // directory fds from root down; root itself is not in it
	cur := func() int {
		if len(stack) == 0 {
			return root
		}
		return stack[len(stack)-1]
	}
	defer func() {
		for _, fd := range stack {
			unix.Close(fd)
		}
	}()
	for len(parts) > 0 {
		p := parts[0]
		parts = parts[1:]
		switch p {
		case "", ".":
			continue
		case "..":
			if len(stack) > 0 {
				unix.Close(stack[len(stack)-1])
				stack = stack[:len(stack)-1]
			}
			continue
		}
		last := len(parts) == 0
		var st unix.Stat_t
		if err := unix.Fstatat(cur(), p, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if last && noFollowFinal {
				return -1, unix.ELOOP
			}
			if links++; links > maxLinks {
				return -1, unix.ELOOP
			}
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(cur(), p, buf)
			if err != nil {
				return -1, err
			}
			target := string(buf[:n])
			if strings.HasPrefix(target, "/") {
				for _, fd := range stack {
					unix.Close(fd)
				}
				stack = stack[:0]
			}
			parts = append(strings.Split(target, "/"), parts...)
			continue
		}
		if last {
			return unix.Openat(cur(), p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
		}
		fd, err := unix.Openat(cur(), p, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		stack = append(stack, fd)
	}
	return unix.Openat(cur(), ".", unix.O_RDONLY|unix.O_CLOEXEC|unix.O_DIRECTORY, 0)
}

// CwdInRoot returns the target's working directory as the target sees it:
// the kernel prints /proc/<pid>/cwd relative to the reader's root, so for a
// chrooted target the root's own path is removed.
func CwdInRoot(pid int) (string, error) {
	cwd, err := Cwd(pid)
	if err != nil {
		return "", err
	}
	root, err := os.Readlink(PidPath(pid, "root"))
	if err != nil {
		return "", wrapGone(err)
	}
	if root == "/" {
		return cwd, nil
	}
	if rest, ok := strings.CutPrefix(cwd, root); ok && (rest == "" || rest[0] == '/') {
		if rest == "" {
			rest = "/"
		}
		return rest, nil
	}
	return cwd, nil
}
