package fdtarget

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

const heapBound = 4 << 20

func addHostFiles(f *testing.F, glob string) {
	names, err := filepath.Glob(filepath.Join("testdata", "host", glob))
	if err != nil || len(names) == 0 {
		f.Fatalf("no %s in testdata/host: %v", glob, err)
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzParseFdinfo(f *testing.F) {
	addHostFiles(f, "fdinfo-*")
	f.Fuzz(func(t *testing.T, b []byte) {
		var fi Fdinfo
		used := testutil.HeapBytes(func() { fi = ParseFdinfo(b) })
		if used > uint64(16*len(b))+heapBound {
			t.Fatalf("%d bytes allocated for %d bytes of input", used, len(b))
		}
		if len(fi.Epoll) > maxEpollParsed || len(fi.Epoll) > fi.EpollCount {
			t.Fatalf("%d epoll items kept of %d counted", len(fi.Epoll), fi.EpollCount)
		}
		for _, it := range fi.Epoll {
			if it.FD < 0 {
				t.Fatalf("item %+v", it)
			}
		}
		if tf := fi.Timerfd; tf != nil && (tf.Value < 0 || tf.Interval < 0) {
			t.Fatalf("timer %+v", tf)
		}
	})
}

func FuzzParseNetLine(f *testing.F) {
	addHostFiles(f, "net-*")
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, line := range strings.Split(string(b), "\n") {
			for _, v6 := range []bool{false, true} {
				if s, ok := ParseInetLine([]byte(line), v6); ok {
					if !s.Local.IsValid() || !s.Remote.IsValid() || (!v6 && (!s.Local.Addr().Is4() || !s.Remote.Addr().Is4())) {
						t.Fatalf("%q (v6 %v): %+v", line, v6, s)
					}
				}
			}
			if u, ok := ParseUnixLine([]byte(line)); ok && strings.ContainsRune(u.Path, '\n') {
				t.Fatalf("%q: a path across lines %q", line, u.Path)
			}
		}
	})
}

func FuzzParseDiagAnswer(f *testing.F) {
	f.Add([]byte{36, 0, 0, 0, 20, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 4, 3, 2, 1, 255, 255, 255, 255, 0, 0, 0, 0, 8, 0, 2, 0, 7, 0, 0, 0}, uint32(5))
	f.Add([]byte{20, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 254, 255, 255, 255}, uint32(5))
	f.Fuzz(func(t *testing.T, b []byte, seq uint32) {
		d, done, err := parseDiagAnswer(b, seq)
		if !done && (err != nil || d != (UnixDiag{})) {
			t.Fatalf("not done, yet %+v, %v", d, err)
		}
		if len(d.Name) > len(b) {
			t.Fatalf("a name of %d bytes from %d", len(d.Name), len(b))
		}
	})
}

// FuzzDescribe: whatever names a target and its peers chose, what a
// target is said to be stays on one line and commands no terminal.
func FuzzDescribe(f *testing.F) {
	f.Add("/var/lib/db", "postgres", "/run/app.sock")
	f.Add("x\x1b]0;pwned\x07", "a\nb", "@\x00\u202e")
	f.Fuzz(func(t *testing.T, path, name, sock string) {
		peer := []Holder{{PID: 7, Name: name, FD: 3, Access: "read", State: "stopped"}}
		for _, tg := range []*Target{
			{Link: path, Kind: KindFile, Path: path, Device: name},
			{Link: "pipe:[1]", Kind: KindPipe, Flags: 1, Peers: peer},
			{Link: "socket:[2]", Kind: KindSocket, Socket: &Socket{Proto: "UNIX-STREAM", Found: true, Name: sock, PeerName: sock, State: "CONNECTED", PeerInode: 3}, Peers: peer},
			{Link: name, Kind: KindOther},
			{Link: "socket:[4]", Kind: KindSocket, Socket: &Socket{Proto: name}},
		} {
			s := tg.String()
			for _, r := range s {
				if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == '\u202e' {
					t.Fatalf("%q holds %U", s, r)
				}
			}
		}
	})
}
