package procfs

import (
	"fmt"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/<pid>/maps.
type Mapping struct {
	Start, End uint64
	Perms      string // "r-xp"
	Offset     uint64 // file offset of Start
	Dev        string // "fd:01"
	Inode      uint64
	// Path is the pathname field: a file path in the target's mount
	// namespace, a pseudo name such as "[stack]" or "[vdso]", or "" for
	// anonymous memory. A " (deleted)" suffix is removed and Deleted set.
	Path    string
	Deleted bool
}

// Exec reports whether the mapping is executable.
func (m Mapping) Exec() bool { return len(m.Perms) > 2 && m.Perms[2] == 'x' }

// IsFile reports whether the mapping is backed by a file (not anonymous
// memory and not a kernel pseudo mapping like [vdso]).
func (m Mapping) IsFile() bool { return strings.HasPrefix(m.Path, "/") }

// Contains reports whether addr falls in the mapping.
func (m Mapping) Contains(addr uint64) bool { return addr >= m.Start && addr < m.End }

// MapFilesPath is the /proc/<pid>/map_files entry that opens this mapping's
// file even when it was deleted or lives in another mount namespace.
func (m Mapping) MapFilesPath(pid int) string {
	return PidPath(pid, "map_files", fmt.Sprintf("%x-%x", m.Start, m.End))
}

// ReadMaps reads and parses /proc/<pid>/maps.
func ReadMaps(pid int) ([]Mapping, error) {
	b, err := readPid(pid, "maps")
	if err != nil {
		return nil, err
	}
	maps, err := ParseMaps(string(b))
	if err != nil {
		return maps, fmt.Errorf("%s: %w", PidPath(pid, "maps"), err)
	}
	return maps, nil
}

// ParseMaps parses the text of a maps file. Malformed lines are an error
// naming the line: the kernel writes this file, so a bad line means we
// misread it, not that the target lied.
func ParseMaps(text string) ([]Mapping, error) {
	// A process of thousands of threads maps thousands of stacks, and
	// a snapshot reads its map more than once: the text is walked in
	// place, each field a substring of it.
	maps := make([]Mapping, 0, strings.Count(text, "\n")+1)
	for n := 0; text != ""; n++ {
		line, rest, _ := strings.Cut(text, "\n")
		text = rest
		if line == "" {
			continue
		}
		m, err := parseMapsLine(line)
		if err != nil {
			return maps, fmt.Errorf("maps line %d: %w", n+1, err)
		}
		maps = append(maps, m)
	}
	return maps, nil
}

func parseMapsLine(line string) (Mapping, error) {
	var m Mapping
	// address perms offset dev inode [pathname]; pathname may hold spaces.
	var fields [5]string
	rest := line
	for i := range fields {
		rest = strings.TrimLeft(rest, " ")
		j := strings.IndexByte(rest, ' ')
		if j < 0 {
			fields[i], rest = rest, ""
			continue
		}
		fields[i], rest = rest[:j], rest[j:]
	}
	if fields[4] == "" {
		return m, fmt.Errorf("too few fields in %q", line)
	}
	lo, hi, ok := strings.Cut(fields[0], "-")
	if !ok {
		return m, fmt.Errorf("bad range %q", fields[0])
	}
	var err error
	if m.Start, err = strconv.ParseUint(lo, 16, 64); err != nil {
		return m, fmt.Errorf("bad start %q", lo)
	}
	if m.End, err = strconv.ParseUint(hi, 16, 64); err != nil {
		return m, fmt.Errorf("bad end %q", hi)
	}
	m.Perms = fields[1]
	if m.Offset, err = strconv.ParseUint(fields[2], 16, 64); err != nil {
		return m, fmt.Errorf("bad offset %q", fields[2])
	}
	m.Dev = fields[3]
	if m.Inode, err = strconv.ParseUint(fields[4], 10, 64); err != nil {
		return m, fmt.Errorf("bad inode %q", fields[4])
	}
	m.Path = strings.TrimLeft(rest, " ")
	if p, ok := strings.CutSuffix(m.Path, " (deleted)"); ok {
		m.Path, m.Deleted = p, true
	}
	return m, nil
}
