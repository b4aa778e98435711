package objfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path"
	"strings"
)

// A binary shipped without symbols names its separate debug file two
// ways, looked up in this order (gdb's and perf's): by build id under
// <debugdir>/.build-id/, and by .gnu_debuglink (a file name plus the CRC32
// of the debug file) next to the binary, in its .debug/ directory, and
// under <debugdir>/<binary's directory>/.

// findDebugFile returns the debug file of o, how it was found, and what
// was tried (for the report when nothing was found or usable). The debug
// file is the caller's to detach.
func (o *File) findDebugFile(env *Env) (dbg *File, how string, tried []string) {
	if o.BuildID != "" && len(o.BuildID) > 2 {
		for _, dir := range env.debugDirs() {
			name := path.Join(dir, ".build-id", o.BuildID[:2], o.BuildID[2:]+".debug")
			d, err := openDebugFile(env, name)
			if err != nil {
				tried = append(tried, describeMiss(name, err))
				continue
			}
			if d.BuildID != o.BuildID {
				tried = append(tried, fmt.Sprintf("%s: build id %s, want %s", d.Name, orNone(d.BuildID), o.BuildID))
				d.detach()
				continue
			}
			return d, "build-id " + name, tried
		}
	}
	link, crc, err := o.debugLink()
	if err != nil {
		tried = append(tried, err.Error())
		return nil, "", tried
	}
	if link == "" {
		return nil, "", tried
	}
	dir := path.Dir(o.Path)
	cands := []string{path.Join(dir, link), path.Join(dir, ".debug", link)}
	for _, d := range env.debugDirs() {
		cands = append(cands, path.Join(d, dir, link))
	}
	for _, name := range cands {
		if name == o.Path {
			continue // a debuglink naming the binary itself
		}
		d, err := openDebugFile(env, name)
		if err != nil {
			tried = append(tried, describeMiss(name, err))
			continue
		}
		if got, err := crcFile(d); err != nil || got != crc {
			tried = append(tried, fmt.Sprintf("%s: CRC %08x, the debuglink wants %08x", d.Name, got, crc))
			d.detach()
			continue
		}
		if d.BuildID != "" && o.BuildID != "" && d.BuildID != o.BuildID {
			tried = append(tried, fmt.Sprintf("%s: build id %s, want %s", d.Name, d.BuildID, o.BuildID))
			d.detach()
			continue
		}
		return d, "debuglink " + name, tried
	}
	return nil, "", tried
}

func describeMiss(name string, err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return name + ": not found"
	}
	return name + ": " + err.Error()
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// openDebugFile opens a debug file through env (in the target's mount
// namespace, then in ours: debug files are often installed on the host,
// not in a container). It is not cached: its tables become part of the
// binary's Symbols.
func openDebugFile(env *Env, name string) (*File, error) {
	fd, err := env.open(name)
	if err != nil {
		return nil, err
	}
	size, err := regularSize(fd)
	if err != nil {
		return nil, err
	}
	return openUncached(fd, name, size)
}

// debugLink reads .gnu_debuglink.
func (o *File) debugLink() (string, uint32, error) {
	b, err := o.section(".gnu_debuglink")
	if err != nil || b == nil {
		return "", 0, err
	}
	return parseDebugLink(b, o.Name, o.ef.ByteOrder)
}

// parseDebugLink decodes a .gnu_debuglink section: a NUL-terminated file
// name, padding to four bytes, and the CRC32 of the debug file. The name
// must be a plain file name: it is joined to directories we then open.
func parseDebugLink(b []byte, file string, bo binary.ByteOrder) (string, uint32, error) {
	i := bytes.IndexByte(b, 0)
	if i <= 0 {
		return "", 0, fmt.Errorf("%s: .gnu_debuglink has no file name", file)
	}
	name := string(b[:i])
	off := align4(uint64(i + 1))
	if off+4 > uint64(len(b)) {
		return "", 0, fmt.Errorf("%s: .gnu_debuglink is truncated (%d bytes)", file, len(b))
	}
	if strings.Contains(name, "/") || name == "." || name == ".." {
		return "", 0, fmt.Errorf("%s: .gnu_debuglink names %q, not a plain file name: ignored", file, name)
	}
	return name, bo.Uint32(b[off:]), nil
}

// crcFile computes the CRC32 (IEEE, as gdb and objcopy do) of a whole file.
func crcFile(o *File) (uint32, error) {
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, io.NewSectionReader(o.r, 0, o.size)); err != nil {
		return 0, fmt.Errorf("%s: %w", o.Name, err)
	}
	return h.Sum32(), nil
}

// miniDebugInfo opens the ELF file inside .gnu_debugdata.
func (o *File) miniDebugInfo() (*File, error) {
	b, err := o.section(".gnu_debugdata")
	if err != nil || b == nil {
		return nil, err
	}
	img, err := inflateXZ(b)
	if err != nil {
		return nil, fmt.Errorf("%s: .gnu_debugdata at offset %#x: %w", o.Name, o.ef.Section(".gnu_debugdata").Offset, err)
	}
	return OpenImage(o.Path, o.Name+"[.gnu_debugdata]", img)
}
