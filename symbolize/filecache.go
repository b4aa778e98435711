package symbolize

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Symbol tables and DWARF of a file are read once per stallwatch process,
// not once per capture: a watchdog captures the same target again and
// again, and reading a large binary's tables costs far more than a
// capture's lookups. The cache holds parsed data only, no descriptors,
// and is bounded by bytes (least recently used first out).

// fileKey identifies a file's content: the same inode, unchanged since
// (size and times), looked up with the same debug directories from the
// same root.
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
	env          string // debug directories and the target's root
}

// fileSyms is what loading a file produced.
type fileSyms struct {
	syms                  *symtab
	lines                 lineSource
	symSource, lineSource string
	notes                 []string
	bytes                 int64
	used                  uint64 // LRU clock
}

// maxCachedBytes bounds the memory of cached tables.
const maxCachedBytes = 512 << 20

var fileCache struct {
	sync.Mutex
	m     map[fileKey]*fileSyms
	bytes int64
	clock uint64
	hits  int // for tests
}

// cacheKey returns o's key, or false for images not backed by a file.
func (p *Process) cacheKey(o *objFile) (fileKey, bool) {
	f, ok := o.c.(*os.File)
	if !ok || f == nil {
		return fileKey{}, false
	}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return fileKey{}, false
	}
	return fileKey{
		dev: st.Dev, ino: st.Ino, size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano(),
		env: strings.Join(p.debugDirs, "\x00") + "\x00" + p.rootID,
	}, true
}

func cachedFile(k fileKey) *fileSyms {
	fileCache.Lock()
	defer fileCache.Unlock()
	fs := fileCache.m[k]
	if fs != nil {
		fileCache.clock++
		fs.used = fileCache.clock
		fileCache.hits++
	}
	return fs
}

func cacheFile(k fileKey, fs *fileSyms) {
	fileCache.Lock()
	defer fileCache.Unlock()
	if fileCache.m == nil {
		fileCache.m = map[fileKey]*fileSyms{}
	}
	if old := fileCache.m[k]; old != nil {
		fileCache.bytes -= old.bytes
	}
	fileCache.clock++
	fs.used = fileCache.clock
	fileCache.m[k] = fs
	fileCache.bytes += fs.bytes
	for fileCache.bytes > maxCachedBytes && len(fileCache.m) > 1 {
		var oldest fileKey
		var oldestUse uint64 = ^uint64(0)
		for k, v := range fileCache.m {
			if v.used < oldestUse {
				oldest, oldestUse = k, v.used
			}
		}
		fileCache.bytes -= fileCache.m[oldest].bytes
		delete(fileCache.m, oldest)
	}
}

// apply makes o use tables loaded before.
func (o *objFile) apply(fs *fileSyms) {
	o.syms, o.lines = fs.syms, fs.lines
	o.symSource, o.lineSource = fs.symSource, fs.lineSource
	o.notes = append(o.notes, fs.notes...)
}

// snapshot is what o loaded, for the cache.
func (o *objFile) snapshot() *fileSyms {
	fs := &fileSyms{syms: o.syms, lines: o.lines, symSource: o.symSource, lineSource: o.lineSource,
		notes: append([]string(nil), o.notes...)}
	if o.syms != nil {
		fs.bytes += int64(len(o.syms.syms)) * 24
		for _, s := range o.syms.strs {
			fs.bytes += int64(len(s))
		}
	}
	if sz, ok := o.lines.(interface{ sizeBytes() int64 }); ok {
		fs.bytes += sz.sizeBytes()
	}
	return fs
}

// rootID identifies the target's root directory (containers have their
// own), so that debug files found inside one are not used for another.
func rootID(path string) string {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}
