package unwind

import (
	"encoding/binary"
	"math"
	"os"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/addrspace"
	"github.com/stallwatch/stallwatch/internal/callframe"
	"github.com/stallwatch/stallwatch/internal/monotime"
)

// loadingJIT describes JIT functions and says, per generation, where code
// was loaded (as target's jitUnwind does from the JIT's files); it counts
// the questions asked of it.
type loadingJIT struct {
	mu      sync.Mutex
	gen     uint64
	funcs   [][2]uint64            // [lo, hi) of each function
	changed map[uint64][][2]uint64 // generation → ranges its loads covered
	asked   int
}

func (j *loadingJIT) UnwindInfo(pc, t uint64) (*callframe.Table, uint64, JITSpan, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.asked++
	return nil, 0, anyTime, false // frame pointers, for all time
}

func (j *loadingJIT) FuncAt(pc, t uint64) (lo, hi uint64, valid JITSpan, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.asked++
	for _, f := range j.funcs {
		if pc >= f[0] && pc < f[1] {
			return f[0], f[1], anyTime, true
		}
	}
	return 0, 0, anyTime, false
}

func (j *loadingJIT) Generation(uint64) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.gen
}

func (j *loadingJIT) Unchanged(g, lo, hi uint64) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for n := g + 1; n <= j.gen; n++ {
		for _, r := range j.changed[n] {
			if lo < r[1] && r[0] < hi {
				return false
			}
		}
	}
	return true
}

// load is the JIT loading code over [lo, hi): a new generation.
func (j *loadingJIT) load(lo, hi uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.gen++
	if j.changed == nil {
		j.changed = map[uint64][][2]uint64{}
	}
	j.changed[j.gen] = append(j.changed[j.gen], [2]uint64{lo, hi})
}

func (j *loadingJIT) questions() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.asked
}

// jitPage is a page of anonymous executable memory of this process, as a
// JIT's code is, and an unwinder that has seen it mapped.
func jitPage(t *testing.T) (*Process, []byte, uint64) {
	t.Helper()
	code, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(code) })
	space, err := addrspace.Open(os.Getpid(), addrspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { space.Close() })
	p := NewProcess(space)
	base := uint64(uintptr(unsafe.Pointer(&code[0])))
	if cr := p.lookup(base); cr == nil || !cr.anon {
		t.Fatalf("the page at %#x is not anonymous code to the unwinder: %+v", base, cr)
	}
	return p, code, base
}

// TestJITCallerReplacedNotStale: the verdict on a caller in JIT code (the
// call before its return address calls the frame below) is cached, and
// never reused once the code there was replaced: code the JIT says it
// loaded over the caller's is read again at once, for the next sample;
// code replaced without a word (nobody describes it) is read again for a
// sample taken more than jitBytesFor after the read. Code loaded
// elsewhere leaves the verdict cached.
func TestJITCallerReplacedNotStale(t *testing.T) {
	const (
		callee = 0x100 // offsets in the page: the function sampled
		caller = 0x200 // and the one whose call returns to ra
		callAt = caller + 0x10
		ra     = callAt + 5
		sp     = 0x7ffe0000
	)
	p, code, base := jitPage(t)
	writeCall := func() {
		code[callAt] = 0xe8 // call rel32, to the callee
		rel := int32(callee) - int32(ra)
		binary.LittleEndian.PutUint32(code[callAt+1:], uint32(rel))
	}
	replace := func() { copy(code[callAt:ra], []byte{0x90, 0x90, 0x90, 0x90, 0x90}) } // nops: no call
	j := &loadingJIT{gen: 1, funcs: [][2]uint64{{base + callee, base + callee + 0x40}, {base + caller, base + caller + 0x40}}}
	p.SetJIT(j)
	// The sampled frame has no rules (frame pointers): its caller is a
	// guess, checked against the code before its return address.
	stack := make([]byte, 64)
	binary.LittleEndian.PutUint64(stack[16:], 0) // the saved frame pointer: the chain ends there
	binary.LittleEndian.PutUint64(stack[24:], base+ra)
	sample := func(t uint64) Sample {
		return Sample{Regs: Regs{IP: base + callee + 4, SP: sp, BP: sp + 16, BPKnown: true}, Stack: stack, Time: t}
	}
	called := []uint64{base + callee + 4, base + ra}
	refuted := []uint64{base + callee + 4}
	walk := func(what string, at uint64, want []uint64) {
		t.Helper()
		got, cut := p.UnwindSample(sample(at), MaxFrames, nil)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: %#x (%v), want %#x", what, got, cut, want)
		}
		if len(want) == 1 && cut.Reason != NotACall {
			t.Fatalf("%s: cut %v, want %v", what, cut, NotACall)
		}
	}

	t.Run("announced", func(t *testing.T) {
		writeCall()
		now := monotime.Now()
		walk("the first walk", now, called)
		asked := j.questions()
		walk("the same code again", now+1, called)
		if n := j.questions() - asked; n != 0 {
			t.Errorf("the second walk asked the JIT %d times (want 0: its answers cached)", n)
		}
		j.load(base+0x800, base+0x900) // elsewhere
		walk("after code loaded elsewhere", now+2, called)
		// The JIT replaces the caller's code, and says so.
		replace()
		j.load(base+caller, base+caller+0x40)
		walk("after the caller's code was replaced", now+3, refuted)
	})

	t.Run("unannounced", func(t *testing.T) {
		writeCall()
		j.load(base+caller, base+caller+0x40) // the call is back, and said to be
		now := monotime.Now()
		walk("the first walk", now, called)
		replace() // nobody says so
		walk("a sample taken long after the read", now+2*jitBytesFor, refuted)
	})
}

// TestJITRuleKeptWhereNothingChanged: a JIT frame's rule cached in one
// generation is kept in the next when nothing was loaded at its address
// (Unchanged), and asked again where something was.
func TestJITRuleKeptWhereNothingChanged(t *testing.T) {
	p, _, base := jitPage(t)
	j := &loadingJIT{gen: 1}
	p.SetJIT(j)
	stack := make([]byte, 64)
	smp := Sample{Regs: Regs{IP: base + 0x104, SP: 0x7ffe0000}, Stack: stack, Time: math.MaxUint64 - 1}
	p.UnwindSample(smp, MaxFrames, nil)
	asked := j.questions()
	j.load(base+0x800, base+0x900)
	p.UnwindSample(smp, MaxFrames, nil)
	if n := j.questions() - asked; n != 0 {
		t.Errorf("asked %d times after code was loaded elsewhere (want 0)", n)
	}
	j.load(base+0x100, base+0x200)
	p.UnwindSample(smp, MaxFrames, nil)
	if j.questions() == asked {
		t.Error("not asked again after code was loaded at the frame's address")
	}
}
