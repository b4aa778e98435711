package testutil

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// PerfInputs are the files `perf report` and stallwatch's symbolizing of
// pid's samples read: every file pid maps, the machine's debug files
// (/usr/lib/debug), perf and its libraries, and extra (perf.data, perf's
// build-id cache: regular files, or directories walked).
func PerfInputs(pid int, extra ...string) ([]string, error) {
	var files []string
	// /proc/<pid>/maps read here: package procfs's tests import this one.
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && strings.HasPrefix(f[5], "/") {
			files = append(files, f[5])
		}
	}
	if perf, err := exec.LookPath("perf"); err == nil {
		files = append(files, perf)
		if out, err := exec.Command("ldd", perf).Output(); err == nil {
			for _, line := range strings.Split(string(out), "\n") {
				if _, path, ok := strings.Cut(line, "=> "); ok && len(strings.Fields(path)) > 0 {
					files = append(files, strings.Fields(path)[0])
				}
			}
		}
	}
	for _, root := range append([]string{"/usr/lib/debug"}, extra...) {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				files = append(files, path)
			}
			return nil
		})
	}
	return files, nil
}

// DropPageCache asks the kernel to drop the files' pages from the page
// cache, as a first read after boot would find them. Pages a process maps
// stay (the kernel keeps them); a file's symbol tables and DWARF are not
// mapped. Only these files are touched: the rest of the machine's cache,
// others' work, stays as it is.
func DropPageCache(files []string) {
	for _, path := range files {
		if f, err := os.Open(path); err == nil {
			_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			f.Close()
		}
	}
}

// WarmPageCache reads the files whole, into the page cache.
func WarmPageCache(files []string) {
	for _, path := range files {
		if f, err := os.Open(path); err == nil {
			_, _ = io.Copy(io.Discard, f)
			f.Close()
		}
	}
}
