package cpython

import (
	"errors"
	"strings"
	"testing"
)

// TestFakeImages checks the builder against the reader before the tests
// that break its images rely on it: every version's standard image reads
// back as laid out.
func TestFakeImages(t *testing.T) {
	for _, minor := range minors {
		f, addr, states := standardImage(minor)
		rt, _ := f.open(addr, Options{})
		d, err := rt.Dump()
		if err != nil {
			t.Fatalf("3.%d: %v", minor, err)
		}
		if len(d.Threads) != 2 || d.Threads[0].TID != 4242 || d.Threads[1].TID != 4243 || !d.Threads[0].HoldsGIL || d.Threads[1].HoldsGIL {
			t.Fatalf("3.%d: threads %+v", minor, d.Threads)
		}
		got := describe(d.Threads[0].Frames)
		// Before 3.11 every frame is its own evaluation call.
		leafEntry := minor < 11
		want := "leaf /srv/app.py:12 entry=" + map[bool]string{true: "true", false: "false"}[leafEntry] +
			"; Handler.handle /srv/app.py:21 entry=true; <module> /srv/main.py:5 entry=true; "
		if got != want {
			t.Errorf("3.%d:\n got %s\nwant %s", minor, got, want)
		}
		if len(d.Threads[1].Frames) != 0 || d.Threads[0].Err != nil || d.Threads[1].Err != nil {
			t.Errorf("3.%d: %+v", minor, d.Threads)
		}
		if fs, err := rt.Frames(states[0], nil); err != nil || describe(fs) != got {
			t.Errorf("3.%d: Frames %s, %v", minor, describe(fs), err)
		}
	}
}

// innermost returns the address of thread state ts's innermost frame
// (through 3.11 and 3.12's _PyCFrame).
func innermost(f *fakeBuilder, ts uint64) uint64 {
	fr := u64(f.at(ts+uint64(f.l.ThreadFrame), 8), 0)
	if f.l.CFrameCurrentFrame >= 0 {
		fr = u64(f.at(fr+uint64(f.l.CFrameCurrentFrame), 8), 0)
	}
	return fr
}

// TestGarbage breaks one word of a standard image at a time, as a target
// changing its structures under the reader (or garbage) would, and checks
// that the reader says what and where, keeps what it read before, and
// never loops.
func TestGarbage(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(f *fakeBuilder, states []uint64)
		want   func(err error) bool
		// frames is how many frames of the first thread are still read.
		frames int
	}{
		{"frame chain cycle", func(f *fakeBuilder, s []uint64) {
			fr := innermost(f, s[0])
			f.put64(fr+uint64(f.l.FrameBack), fr)
		}, isCorrupt, 1},
		{"frame back into unmapped memory", func(f *fakeBuilder, s []uint64) {
			fr := innermost(f, s[0])
			f.put64(fr+uint64(f.l.FrameBack), 0x10)
		}, isRead, 1},
		{"misaligned frame", func(f *fakeBuilder, s []uint64) {
			fr := innermost(f, s[0])
			f.put64(fr+uint64(f.l.FrameBack), fakeBase+3)
		}, isRead, 1},
		{"code pointer to a str", func(f *fakeBuilder, s []uint64) {
			fr := innermost(f, s[0])
			f.put64(fr+uint64(f.l.FrameCode), f.str("not code"))
		}, isCorrupt, 0},
		{"name of a huge length", func(f *fakeBuilder, s []uint64) {
			fr := innermost(f, s[0])
			code := u64(f.at(fr+uint64(f.l.FrameCode), 8), 0)
			name := u64(f.at(code+uint64(f.l.CodeName), 8), 0)
			f.put64(name+uint64(f.l.UnicodeLength), 1<<62)
		}, isCorrupt, 0},
		{"line table of a lying size", func(f *fakeBuilder, s []uint64) {
			fr := innermost(f, s[0])
			code := u64(f.at(fr+uint64(f.l.FrameCode), 8), 0)
			tbl := u64(f.at(code+uint64(f.l.CodeLineTable), 8), 0)
			f.put64(tbl+offObSize, 1<<40)
		}, nil, 3},
	}
	for _, minor := range minors {
		for _, c := range cases {
			f, addr, states := standardImage(minor)
			c.break_(f, states)
			rt, mem := f.open(addr, Options{})
			fs, err := rt.Frames(states[0], nil)
			if c.want == nil {
				if err != nil {
					t.Errorf("3.%d %s: %v", minor, c.name, err)
				}
			} else if !c.want(err) {
				t.Errorf("3.%d %s: error %v", minor, c.name, err)
			}
			if len(fs) != c.frames {
				t.Errorf("3.%d %s: %d frames read (%s), want %d", minor, c.name, len(fs), describe(fs), c.frames)
			}
			if mem.reads > 64 {
				t.Errorf("3.%d %s: %d reads", minor, c.name, mem.reads)
			}
		}
	}
}

func isCorrupt(err error) bool {
	var c *CorruptError
	return errors.As(err, &c) && errors.Is(err, ErrNotAnObject)
}

func isRead(err error) bool {
	var r *ReadError
	return errors.As(err, &r)
}

// TestLineTableLost: a code object whose line table cannot be read still
// names its function, with line 0.
func TestLineTableLost(t *testing.T) {
	for _, minor := range minors {
		f, addr, states := standardImage(minor)
		fr := innermost(f, states[0])
		code := u64(f.at(fr+uint64(f.l.FrameCode), 8), 0)
		f.put64(code+uint64(f.l.CodeLineTable), 0x20)
		rt, _ := f.open(addr, Options{})
		fs, err := rt.Frames(states[0], nil)
		if err != nil || len(fs) != 3 || fs[0].Function != "leaf" || fs[0].Line != 0 || fs[1].Line != 21 {
			t.Errorf("3.%d: %s %v", minor, describe(fs), err)
		}
	}
}

// TestTooDeep: a chain longer than MaxDepth ends there with ErrTooDeep
// and the frames read.
func TestTooDeep(t *testing.T) {
	for _, minor := range minors {
		f := newFakeBuilder(minor)
		c := f.code("recurse", "/srv/deep.py", 1, 1)
		var fs []fakeFrame
		for range 50 {
			fs = append(fs, fakeFrame{code: c, unit: 2, entry: true})
		}
		addr, states := f.runtime([]fakeThread{{tid: 1, frames: fs}})
		rt, mem := f.open(addr, Options{MaxDepth: 20})
		got, err := rt.Frames(states[0], nil)
		if !errors.Is(err, ErrTooDeep) || len(got) != 20 {
			t.Errorf("3.%d: %d frames, %v", minor, len(got), err)
		}
		if mem.reads > 20 {
			t.Errorf("3.%d: %d reads for 20 frames on a few pages", minor, mem.reads)
		}
	}
}

// TestThreadListCycle: a thread list that comes back on itself is a
// CorruptError naming the list, with the threads before it.
func TestThreadListCycle(t *testing.T) {
	for _, minor := range minors {
		f, addr, states := standardImage(minor)
		f.put64(states[1]+uint64(f.l.ThreadNext), states[0])
		rt, _ := f.open(addr, Options{})
		ts, _, err := rt.Threads()
		if !isCorrupt(err) || !strings.Contains(err.Error(), "thread state list") || len(ts) != 2 {
			t.Errorf("3.%d: %d threads, %v", minor, len(ts), err)
		}
	}
}

// TestNotInitialized: a runtime with no interpreter yet says so.
func TestNotInitialized(t *testing.T) {
	f := newFakeBuilder(11)
	addr, _ := f.runtime(nil)
	f.put64(addr+uint64(f.l.RuntimeInterpretersHead), 0)
	rt, _ := f.open(addr, Options{})
	if _, err := rt.Dump(); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("Dump: %v", err)
	}
}

// TestStrings reads names of each width: ASCII, latin-1, UCS-2, UCS-4,
// and one longer than the bound (cut with "…").
func TestStrings(t *testing.T) {
	long := strings.Repeat("x", maxName+10)
	for _, minor := range minors {
		f := newFakeBuilder(minor)
		for _, s := range []string{"", "spin", "café", "函数", "𝔣𝔬𝔬", long} {
			a := f.str(s)
			rt, _ := f.open(0, Options{})
			rt.r.reset(100)
			got, err := rt.str("str", a, maxName)
			want := s
			if len(s) > maxName {
				want = s[:maxName] + "…"
			}
			if err != nil || got != want {
				t.Errorf("3.%d: %q read as %q, %v", minor, s, got, err)
			}
		}
	}
}
