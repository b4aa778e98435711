package cpython

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Version is a CPython version; Micro is -1 when only the minor version
// is known (a file name says python3.9, nothing in memory says more).
type Version struct {
	Major, Minor, Micro int
}

func (v Version) String() string {
	if v.Micro < 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Micro)
}

// fromHex reads PY_VERSION_HEX (0x030b02f0: 3.11.2 final).
func fromHex(h uint64) Version {
	return Version{Major: int(h >> 24 & 0xff), Minor: int(h >> 16 & 0xff), Micro: int(h >> 8 & 0xff)}
}

// Known lists the versions this package reads, oldest first.
func Known() []string {
	var out []string
	for minor := range layouts {
		out = append(out, fmt.Sprintf("3.%d", minor))
	}
	slices.SortFunc(out, func(a, b string) int { return minorOf(a) - minorOf(b) })
	return out
}

func minorOf(v string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(v, "3."))
	return n
}

// VersionError says that the target runs a CPython this package does
// not read, and which it does.
type VersionError struct {
	Version Version
	// From says how the version was learnt: "Py_Version", "_Py_DebugOffsets",
	// "the file name libpython3.14.so.1.0".
	From string
	// Reason is set when the version is known but its build is not:
	// "a free-threaded build".
	Reason string
}

func (e *VersionError) Error() string {
	what := "CPython " + e.Version.String()
	if e.Reason != "" {
		what += ", " + e.Reason
	}
	return fmt.Sprintf("%s (from %s) cannot be read: the versions known are %s (free-threaded builds excepted)",
		what, e.From, strings.Join(Known(), ", "))
}

// ErrNotPython says the process maps no CPython interpreter: no image
// defines _PyRuntime, has a .PyRuntime section, or is named python3.X or
// libpython3.X.
var ErrNotPython = errors.New("no CPython interpreter (python3.X or libpython3.X) is mapped")

// ErrNotInitialized says the interpreter has no interpreter state yet
// (or any more): the process is starting or finalizing.
var ErrNotInitialized = errors.New("the CPython runtime has no interpreter (starting up or finalizing)")

// nameVersion matches the version in a CPython file's name:
// python3.11, libpython3.9.so.1.0, libpython3.7m.so.
var nameVersion = regexp.MustCompile(`^(?:lib)?python(\d)\.(\d{1,2})[a-z]*(?:$|[.-])`)

// versionFromName reads the version a file's name says, if any.
func versionFromName(path string) (Version, bool) {
	m := nameVersion.FindStringSubmatch(filepath.Base(path))
	if m == nil {
		return Version{}, false
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return Version{Major: major, Minor: minor, Micro: -1}, true
}
