package symbolize

import (
	"fmt"
	"os"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// maxVDSO bounds what is read of a [vdso] mapping (it is two pages).
const maxVDSO = 1 << 20

// openVDSO reads the vdso image from the target's memory (it is a
// complete ELF file with .dynsym), or, when the target's memory cannot be
// read, from ours: the kernel maps the same image into every process of
// its architecture.
func (p *Process) openVDSO(pm procfs.Mapping) *objEntry {
	id := fileID{path: fmt.Sprintf("[vdso]@%x", pm.Start)}
	if e, ok := p.objs[id]; ok {
		return e
	}
	e := &objEntry{}
	p.objs[id] = e
	size := int(min(pm.End-pm.Start, maxVDSO))
	b, err := readMem(p.pid, pm.Start, size)
	if err == nil {
		e.o, err = memObjFile("[vdso]", fmt.Sprintf("[vdso] of pid %d", p.pid), b)
		if err == nil {
			e.o.origin = "memory"
			return e
		}
	}
	own, ownErr := ownVDSO()
	if ownErr != nil {
		e.err = fmt.Errorf("vdso of pid %d: %v; our own: %v", p.pid, err, ownErr)
		return e
	}
	e.o = own
	e.o.origin = "memory (stallwatch's own vdso)"
	e.o.note(fmt.Sprintf("vdso of pid %d unreadable (%v): named from stallwatch's own, the same kernel image", p.pid, err))
	return e
}

func ownVDSO() (*objFile, error) {
	self := os.Getpid()
	maps, err := procfs.ReadMaps(self)
	if err != nil {
		return nil, err
	}
	for _, m := range maps {
		if m.Path != "[vdso]" {
			continue
		}
		b, err := readMem(self, m.Start, int(min(m.End-m.Start, maxVDSO)))
		if err != nil {
			return nil, err
		}
		return memObjFile("[vdso]", "[vdso] of stallwatch", b)
	}
	return nil, fmt.Errorf("stallwatch has no [vdso] mapping")
}
