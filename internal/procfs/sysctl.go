package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Sysctl reads the integer kernel setting name, as sysctl(8) names it
// ("kernel.perf_event_paranoid"), from /proc/sys. A setting this kernel
// does not have (kernel.yama.ptrace_scope without Yama) is an error for
// which errors.Is(err, fs.ErrNotExist) holds; the error names the setting.
func Sysctl(name string) (int, error) {
	path := filepath.Join(Root, "sys", strings.ReplaceAll(name, ".", "/"))
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: %w", name, err)
	}
	defer f.Close()
	// The largest integer setting, with its sign and newline, is 21
	// bytes; a few more tell a longer value from a truncated one.
	var b [32]byte
	n, err := f.Read(b[:])
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: %w", name, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: %q is not an integer", name, strings.TrimSpace(string(b[:n])))
	}
	return v, nil
}
