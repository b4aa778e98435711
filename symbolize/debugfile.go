package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path"
	"strings"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// A binary shipped without symbols names its separate debug file two
// ways, looked up in this order (gdb's and perf's): by build id under
// <debugdir>/.build-id/, and by .gnu_debuglink (a file name plus the CRC32
// of the debug file) next to the binary, in its .debug/ directory, and
// under <debugdir>/<binary's directory>/.

// findDebugFile returns the debug file of o, how it was found, and what
// was tried (for the report when nothing was found or usable).
func (p *Process) findDebugFile(o *objFile) (dbg *objFile, how string, tried []string) {
	if o.buildID != "" && len(o.buildID) > 2 {
		for _, dir := range p.debugDirs {
			name := path.Join(dir, ".build-id", o.buildID[:2], o.buildID[2:]+".debug")
			d, err := p.openDebugFile(name)
			if err != nil {
				tried = append(tried, describeMiss(name, err))
				continue
			}
			if d.buildID != o.buildID {
				tried = append(tried, fmt.Sprintf("%s: build id %s, want %s", d.name, orNone(d.buildID), o.buildID))
				d.close()
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
	dir := path.Dir(o.path)
	cands := []string{path.Join(dir, link), path.Join(dir, ".debug", link)}
	for _, d := range p.debugDirs {
		cands = append(cands, path.Join(d, dir, link))
	}
	for _, name := range cands {
		if name == o.path {
			continue // a debuglink naming the binary itself
		}
		d, err := p.openDebugFile(name)
		if err != nil {
			tried = append(tried, describeMiss(name, err))
			continue
		}
		if got, err := crcFile(d); err != nil || got != crc {
			tried = append(tried, fmt.Sprintf("%s: CRC %08x, the debuglink wants %08x", d.name, got, crc))
			d.close()
			continue
		}
		if d.buildID != "" && o.buildID != "" && d.buildID != o.buildID {
			tried = append(tried, fmt.Sprintf("%s: build id %s, want %s", d.name, d.buildID, o.buildID))
			d.close()
			continue
		}
		return d, "debuglink " + name, tried
	}
	return nil, "", tried
}

func describeMiss(name string, err error) string {
	if os.IsNotExist(err) || strings.Contains(err.Error(), "no such file") {
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

// openDebugFile opens a debug file by its path in the target's mount
// namespace, then by the same path in ours (debug files are often
// installed on the host, not in a container).
func (p *Process) openDebugFile(name string) (*objFile, error) {
	f, err := procfs.OpenInRoot(p.pid, name, false)
	if err != nil && !p.sameRoot {
		f, err = os.Open(name)
	}
	if err != nil {
		return nil, err
	}
	return openObjFile(name, f)
}

// debugLink reads .gnu_debuglink.
func (o *objFile) debugLink() (string, uint32, error) {
	b, err := o.section(".gnu_debuglink")
	if err != nil || b == nil {
		return "", 0, err
	}
	return parseDebugLink(b, o.name, o.ef.ByteOrder)
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
func crcFile(o *objFile) (uint32, error) {
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, io.NewSectionReader(o.r, 0, o.size)); err != nil {
		return 0, fmt.Errorf("%s: %w", o.name, err)
	}
	return h.Sum32(), nil
}

// miniDebugInfo opens the ELF file inside .gnu_debugdata.
func (o *objFile) miniDebugInfo() (*objFile, error) {
	b, err := o.section(".gnu_debugdata")
	if err != nil || b == nil {
		return nil, err
	}
	img, err := inflateXZ(b)
	if err != nil {
		return nil, fmt.Errorf("%s: .gnu_debugdata at offset %#x: %w", o.name, o.ef.Section(".gnu_debugdata").Offset, err)
	}
	return memObjFile(o.path, o.name+"[.gnu_debugdata]", img)
}

// symbolSection returns the section of the given type, if any.
func (o *objFile) symbolSection(typ elf.SectionType) *elf.Section {
	for _, s := range o.ef.Sections {
		if s.Type == typ && s.Size > 0 {
			return s
		}
	}
	return nil
}
