package objfile

import (
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Files are parsed once per stallwatch process, not once per target or
// per capture: a watchdog captures the same target again and again, and
// targets share their libraries. One cache holds every File, keyed by one
// identity. A File in use keeps its descriptor; when its last user closes
// it, the descriptor goes and the parsed tables stay, bounded by bytes
// (least recently used first out).

// ID identifies a file's content: the same inode, unchanged since (size
// and times).
type ID struct {
	Dev, Ino     uint64
	Size         int64
	Mtime, Ctime int64
}

func idOf(f *os.File) (ID, bool) {
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		return ID{}, false
	}
	return ID{Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}, true
}

// maxCachedBytes bounds the parsed tables of files nobody uses.
const maxCachedBytes = 512 << 20

var cache fileCache

type fileCache struct {
	mu    sync.Mutex
	m     map[ID]*File
	clock uint64
	bytes atomic.Int64 // parsed data of every cached File
	hits  int          // for tests
}

// acquire returns the cached File of id with one more user, giving it fd
// if it has no descriptor (else fd is closed), or nil when id is not
// cached.
func (c *fileCache) acquire(id ID, fd *os.File, path string) *File {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.m[id]
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.readable() {
		if err := f.attach(fd, id.Size, fd); err != nil {
			// The same inode, size and times, and yet no longer an
			// ELF file: forget it and parse afresh.
			delete(c.m, id)
			c.bytes.Add(-f.bytes.Load())
			f.cached.Store(false)
			return nil
		}
	} else {
		fd.Close()
	}
	f.refs++
	c.clock++
	f.used = c.clock
	c.hits++
	return f
}

// add caches a File just opened (one user); when another goroutine cached
// the same file meanwhile, that one is returned and f let go.
func (c *fileCache) add(f *File) *File {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[ID]*File{}
	}
	if old := c.m[f.id]; old != nil {
		old.mu.Lock()
		if old.readable() {
			old.refs++
			old.mu.Unlock()
			f.mu.Lock()
			f.detach()
			f.mu.Unlock()
			return old
		}
		old.mu.Unlock()
		c.bytes.Add(-old.bytes.Load())
		old.cached.Store(false)
	}
	f.cached.Store(true)
	c.clock++
	f.used = c.clock
	c.m[f.id] = f
	c.bytes.Add(f.bytes.Load())
	return f
}

// release drops a user of f, closing its descriptor with the last one.
func (c *fileCache) release(f *File) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f.mu.Lock()
	f.refs--
	if f.refs <= 0 {
		f.refs = 0
		f.detach()
	}
	f.mu.Unlock()
	c.trim()
}

// grow accounts parsed data added to a cached File.
func (c *fileCache) grow(n int64) { c.bytes.Add(n) }

// trim evicts unused Files, least recently used first, while the cache is
// over its bound (c.mu held).
func (c *fileCache) trim() {
	for c.bytes.Load() > maxCachedBytes {
		var oldest *File
		for _, f := range c.m {
			if f.refs == 0 && (oldest == nil || f.used < oldest.used) {
				oldest = f
			}
		}
		if oldest == nil {
			return
		}
		delete(c.m, oldest.id)
		c.bytes.Add(-oldest.bytes.Load())
		oldest.cached.Store(false)
	}
}

// ResetCache forgets every file's parsed tables, so that the next Open of
// any file parses afresh (benchmarks of a first capture). Files in use
// stay valid for their users.
func ResetCache() {
	cache.mu.Lock()
	defer cache.mu.Unlock()
	for id, f := range cache.m {
		delete(cache.m, id)
		cache.bytes.Add(-f.bytes.Load())
		f.cached.Store(false)
	}
}
