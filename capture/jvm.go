package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stallwatch/stallwatch/jit"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/runtimes"
	"github.com/stallwatch/stallwatch/runtimes/hotspot/attach"
	"github.com/stallwatch/stallwatch/target"
)

// A JVM's JIT code is named without a flag at its start: at the start of
// each capture, beside it, the JVM is asked to write its perf map
// (jcmd Compiler.perfmap, through its attach mechanism: package
// runtimes/hotspot/attach); the capture reads the map with its other JIT
// sources before it names its samples. A JVM that does not answer in
// time (one held at a safepoint cannot) or may not be asked gets its code
// named from its code cache, read from its memory instead. The capture's
// notes say which path gave the names.

// jvmAskTimeout bounds the wait for a JVM's answer: HotSpot starts its
// attach listener and writes its map within milliseconds when it runs.
const jvmAskTimeout = time.Second

// codeCacheSource names the JIT source made of the JVM's code cache.
const codeCacheSource = "[memory: the JVM's code cache]"

// jvmSession is what a Session keeps of a JVM target: one attach client
// for all its captures (a trigger left while the JVM did not answer stays
// until the session ends, so that a JVM that resumes starts its listener
// rather than print a thread dump).
type jvmSession struct {
	tp *target.Process
	// memErr says why the JVM's memory cannot be read (its Java threads
	// then come from its thread dump); nil when it can.
	memErr error

	mu     sync.Mutex
	client *attach.Client
	err    error // why there is no client
}

// newJVMSession is nil for a target that runs no JVM (as its descriptor
// recognises one: runtimes.JVM, a libjvm.so mapped).
func newJVMSession(tp *target.Process) *jvmSession {
	if _, err := tp.Reader(runtimes.JVM); errors.Is(err, runtimes.ErrAbsent) {
		return nil
	}
	return &jvmSession{tp: tp, memErr: jvmMemory(tp)}
}

// perfMapAsk is one capture's request for the JVM's perf map.
type perfMapAsk struct {
	done      chan struct{}
	err       error
	took      time.Duration
	signalled bool
}

// askPerfMap asks the JVM for its perf map beside the capture; nil when
// the target is no JVM.
func (j *jvmSession) askPerfMap(ctx context.Context) *perfMapAsk {
	if j == nil {
		return nil
	}
	a := &perfMapAsk{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		start := time.Now()
		ctx, cancel := context.WithTimeout(ctx, jvmAskTimeout)
		defer cancel()
		c, err := j.attachClient()
		if err == nil {
			_, err = c.Command(ctx, "Compiler.perfmap")
			a.signalled = c.Signalled()
		}
		a.err, a.took = err, time.Since(start)
	}()
	return a
}

// attachClient is the session's client, made at the first ask.
func (j *jvmSession) attachClient() (*attach.Client, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.client == nil && j.err == nil {
		var opts attach.Options
		if inst, err := j.tp.Reader(runtimes.JVM); err == nil {
			if f, ok := inst.(runtimes.Flagger); ok {
				opts.Flags = f.BoolFlag
			}
		}
		j.client, j.err = attach.New(j.tp.Pid(), opts)
	}
	return j.client, j.err
}

// jitNames waits for the ask (within its own deadline), names the JVM's
// code from its code cache when the JVM wrote no map, and says which path
// gave the names. Call it before the samples are named.
func (j *jvmSession) jitNames(a *perfMapAsk) string {
	if a == nil {
		return ""
	}
	<-a.done
	if a.err == nil {
		how := "its attach listener was running"
		if a.signalled {
			how = "its attach listener started for it"
		}
		return fmt.Sprintf("JIT names: the JVM's perf map, written when asked through its attach mechanism "+
			"(jcmd Compiler.perfmap; %s; answered in %v)", how, a.took.Round(time.Millisecond))
	}
	why := a.err.Error()
	if errors.Is(a.err, attach.ErrNoAnswer) {
		why = fmt.Sprintf("the JVM did not answer its attach mechanism within %v (a JVM held at a safepoint cannot)", jvmAskTimeout)
	}
	if j.memErr != nil {
		return fmt.Sprintf("JIT names: none from the JVM: %s; and its memory cannot be read (%v)", why, j.memErr)
	}
	inst, err := j.tp.Reader(runtimes.JVM)
	if err != nil {
		return fmt.Sprintf("JIT names: none from the JVM: %s; and its memory cannot be read (%v)", why, err)
	}
	entries, err := codeNames(inst)
	if len(entries) == 0 {
		return fmt.Sprintf("JIT names: none from the JVM: %s; and its code cache cannot be read (%v)", why, err)
	}
	if err := j.tp.SetMemoryNames(codeCacheSource, entries); err != nil {
		return fmt.Sprintf("JIT names: none from the JVM: %s; and its code cache: %v", why, err)
	}
	return fmt.Sprintf("JIT names: the JVM's code cache read from its memory (%d compiled methods and stubs): %s", len(entries), why)
}

// codeNames are the names of the code the runtime compiled, read from
// its memory (runtimes.CodeNamer), as JIT map entries.
func codeNames(inst runtimes.Instance) ([]jit.MapEntry, error) {
	namer, ok := inst.(runtimes.CodeNamer)
	if !ok {
		return nil, errors.New("its reader names no compiled code")
	}
	code, err := namer.CodeNames()
	out := make([]jit.MapEntry, 0, len(code))
	for _, c := range code {
		out = append(out, jit.MapEntry{Start: c.Start, Size: c.Size, Name: c.Name})
	}
	return out, err
}

// jvmMemory opens the JVM's memory for the snapshot's reading (a test
// makes it fail, as it does for a HotSpot whose layout the reader does
// not know).
var jvmMemory = func(tp *target.Process) error {
	_, err := tp.Reader(runtimes.JVM)
	return err
}

// unread are the runtimes the snapshot must not read: the JVM, when its
// memory cannot be read (its Java threads then come from its thread
// dump: javaThreads).
func (j *jvmSession) unread() []*runtimes.Runtime {
	if j == nil || j.memErr == nil {
		return nil
	}
	return []*runtimes.Runtime{runtimes.JVM}
}

// javaThreads gives the snapshot the JVM's Java threads from the JVM's
// own thread dump (jcmd Thread.print -l, through its attach mechanism)
// when its memory cannot be read: the snapshot read the memory itself
// otherwise. It runs once the snapshot's stops are over (the dump is a
// safepoint, which would wait for a thread held stopped), within
// jvmAskTimeout: a JVM held at a safepoint gives nothing, and the note
// says so.
func (j *jvmSession) javaThreads(ctx context.Context, snap *model.Snapshot) string {
	if j == nil || snap == nil || j.memErr == nil {
		return ""
	}
	memErr := j.memErr
	ctx, cancel := context.WithTimeout(ctx, jvmAskTimeout)
	defer cancel()
	c, err := j.attachClient()
	var out []byte
	if err == nil {
		out, err = c.Command(ctx, "Thread.print -l")
	}
	if err != nil {
		return fmt.Sprintf("Java threads: none: the JVM's memory cannot be read (%v), and its thread dump did not come (%v)", memErr, err)
	}
	threads, problems := runtimes.ApplyJavaThreadDump(snap, out, snapshotNote(snap))
	n := fmt.Sprintf("Java threads: %d from the JVM's thread dump (jcmd Thread.print -l through its attach mechanism): its memory cannot be read (%v)", threads, memErr)
	if len(problems) > 0 {
		n += "; the dump read with problems: " + strings.Join(problems, "; ")
	}
	return n
}

// snapshotNote adds a note to a snapshot's, once.
func snapshotNote(snap *model.Snapshot) func(string, ...any) {
	notes := map[string]bool{}
	for _, n := range snap.Notes {
		notes[n] = true
	}
	return func(format string, args ...any) {
		if n := fmt.Sprintf(format, args...); !notes[n] {
			notes[n] = true
			snap.Notes = append(snap.Notes, n)
		}
	}
}

// close ends the session's attach client (removing a trigger file left
// for a JVM that never answered).
func (j *jvmSession) close() error {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.client == nil {
		return nil
	}
	return j.client.Close()
}

// addNote adds a note to a capture's, when there is one (never into the
// session's own: they may share an array).
func (f *facts) addNote(n string) {
	if n != "" {
		f.notes = append(slices.Clip(f.notes), n)
	}
}
