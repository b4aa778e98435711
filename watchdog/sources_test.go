package watchdog

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/internal/testutil"
)

// beats runs src until the test ends and counts its beats.
type beatCounter struct {
	n  atomic.Int64
	ch chan struct{}
}

func runSource(t *testing.T, src Source) *beatCounter {
	t.Helper()
	bc := &beatCounter{ch: make(chan struct{}, 1000)}
	// A file source's first look at the file is no beat: wait for it, or
	// a change the test makes next could be taken for the starting state.
	var started <-chan bool
	if f, ok := src.(*File); ok && f.started == nil {
		started = startedChan(f)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func() {
			bc.n.Add(1)
			select {
			case bc.ch <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s: Run returned %v after cancel, want context.Canceled", src, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: Run did not return after cancel", src)
		}
	})
	if started != nil {
		select {
		case <-started:
		case err := <-done:
			t.Fatalf("%s: Run returned %v before it started", src, err)
		}
	}
	return bc
}

// expectBeat waits for one beat.
func (bc *beatCounter) expectBeat(t *testing.T, what string, within time.Duration) {
	t.Helper()
	select {
	case <-bc.ch:
	case <-time.After(within):
		t.Fatalf("no beat within %v after %s", within, what)
	}
}

// expectQuiet asserts no beat arrives for d, after dropping beats already
// queued.
func (bc *beatCounter) expectQuiet(t *testing.T, what string, d time.Duration) {
	t.Helper()
	select {
	case <-bc.ch:
		t.Fatalf("beat after %s", what)
	case <-time.After(d):
	}
}

// settle waits until no beat came for quiet (at most 5s).
func (bc *beatCounter) settle(t *testing.T, quiet time.Duration) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-bc.ch:
		case <-time.After(quiet):
			return
		}
	}
	t.Fatalf("beats never stopped for %v", quiet)
}

func (bc *beatCounter) drain() {
	for {
		select {
		case <-bc.ch:
		default:
			return
		}
	}
}

// startedChan yields whether src watches with inotify once it has read the
// file's first state: a change made before would not be a beat.
func startedChan(src *File) <-chan bool {
	ch := make(chan bool, 1)
	src.started = func(inotify bool) { ch <- inotify }
	return ch
}

func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestFileSourceInotify(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "beat")
	writeAtomic(t, path, "1")
	// A poll of an hour: every beat below must come from inotify.
	bc := runSource(t, &File{Path: path, Poll: time.Hour})
	bc.expectQuiet(t, "start (an existing file is not a beat)", 200*time.Millisecond)

	writeAtomic(t, path, "2")
	bc.expectBeat(t, "a rename over the file", 2*time.Second)

	if err := os.WriteFile(path, []byte("3"), 0o644); err != nil {
		t.Fatal(err)
	}
	bc.expectBeat(t, "a write in place", 2*time.Second)

	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, future, future); err != nil {
		t.Fatal(err)
	}
	bc.expectBeat(t, "touch", 2*time.Second)

	bc.settle(t, 100*time.Millisecond)
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	bc.expectQuiet(t, "chmod (not a beat)", 300*time.Millisecond)
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	bc.expectQuiet(t, "a write to another file of the directory", 300*time.Millisecond)

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	bc.expectQuiet(t, "removal (not a beat)", 300*time.Millisecond)
	writeAtomic(t, path, "4")
	bc.expectBeat(t, "the file coming back", 2*time.Second)
}

func TestFingerprintSeesContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "beat")
	if err := os.WriteFile(path, []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	first := fingerprintOf(path, fingerprint{})
	if !first.exists || first.hasSum {
		t.Fatalf("first look %+v: the content is read only when nothing else tells", first)
	}
	baseline := fingerprintOf(path, first)
	if baseline.sum == 0 || !baseline.hasSum {
		t.Fatalf("unchanged file: content not read: %+v", baseline)
	}
	if again := fingerprintOf(path, baseline); !again.sameAs(baseline) {
		t.Errorf("unchanged file looks changed: %+v vs %+v", again, baseline)
	}
	fi, _ := os.Stat(path)
	if err := os.WriteFile(path, []byte("2"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Same size, same mtime (a coarse-mtime file system): only the
	// content tells.
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if after := fingerprintOf(path, baseline); after.sameAs(baseline) {
		t.Errorf("content change not seen: %+v", after)
	}
	if fingerprintOf(path+".missing", baseline).exists {
		t.Error("a missing file exists")
	}
}

func TestFileSourceRewatchesReplacedDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "beat")
	src := &File{Path: path, Poll: 50 * time.Millisecond, SlowPoll: time.Hour}
	started := startedChan(src)
	bc := runSource(t, src)
	if !<-started {
		t.Fatal("inotify does not watch an existing directory")
	}
	writeAtomic(t, path, "1")
	bc.expectBeat(t, "a beat announced by inotify", 2*time.Second)
	// The target recreates its run directory: the old watch sees nothing
	// more. The slow poll (an hour) must not be all that is left.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, path, "2")
	bc.expectBeat(t, "a beat in the recreated directory", 2*time.Second)
	bc.drain()
	writeAtomic(t, path, "3")
	bc.expectBeat(t, "the next beat", 2*time.Second)
}

func TestFileSourcePollBackstop(t *testing.T) {
	// The directory does not exist yet, so inotify cannot watch it: the
	// poll alone must see the beats.
	dir := filepath.Join(t.TempDir(), "later")
	path := filepath.Join(dir, "beat")
	src := &File{Path: path, Poll: 20 * time.Millisecond}
	started := startedChan(src)
	bc := runSource(t, src)
	if <-started {
		t.Fatal("inotify watches a directory that does not exist")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, path, "1")
	bc.expectBeat(t, "the file appearing (poll)", 2*time.Second)
	writeAtomic(t, path, "22")
	bc.expectBeat(t, "a rename (poll)", 2*time.Second)
	bc.settle(t, 50*time.Millisecond)
	bc.expectQuiet(t, "no change", 200*time.Millisecond)
}

func TestFileSourceIgnoresFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "beat")
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	bc := runSource(t, &File{Path: path, Poll: 10 * time.Millisecond})
	bc.expectQuiet(t, "a FIFO in place of the file", 200*time.Millisecond)
}

func TestHTTPSource(t *testing.T) {
	var status atomic.Int32
	var delay atomic.Int64
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Duration(delay.Load()))
		if s := status.Load(); s == http.StatusFound {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	bc := runSource(t, &HTTP{URL: srv.URL + "/health", Interval: 20 * time.Millisecond, Timeout: 100 * time.Millisecond})
	bc.expectBeat(t, "200 answers", 2*time.Second)

	for _, tc := range []struct {
		name   string
		status int32
		delay  time.Duration
	}{
		{"503", 503, 0},
		{"302 to a 200 page", 302, 0},
		{"200 after the timeout", 200, 300 * time.Millisecond},
	} {
		status.Store(tc.status)
		delay.Store(int64(tc.delay))
		bc.settle(t, 150*time.Millisecond) // a probe in flight may still beat
		bc.expectQuiet(t, tc.name, 500*time.Millisecond)
	}
	status.Store(204)
	delay.Store(0)
	bc.expectBeat(t, "204 answers", 2*time.Second)
}

func TestHTTPSourceBadURL(t *testing.T) {
	err := (&HTTP{URL: "://nope"}).Run(context.Background(), func() {})
	if err == nil {
		t.Fatal("bad URL accepted")
	}
}

// polls counts a Progress source's readings, so that a test can wait for
// the source to have looked rather than for time to pass.
type polls chan struct{}

func pollsOf(p *Progress) polls {
	ch := make(polls, 1000)
	p.polled = func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return ch
}

// wait waits for n more readings.
func (ps polls) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-ps:
		case <-time.After(10 * time.Second):
			t.Fatalf("the source did not read the target for 10s")
		}
	}
}

// quietFor asserts that n readings of the source bring no beat, once the
// readings that straddle what came before are done.
func (bc *beatCounter) quietFor(t *testing.T, ps polls, what string, n int) {
	t.Helper()
	ps.wait(t, 2) // what moved before is seen by these
	bc.drain()
	for range len(ps) {
		<-ps
	}
	ps.wait(t, n)
	select {
	case <-bc.ch:
		t.Fatalf("beat after %s", what)
	default:
	}
}

func TestProgressSource(t *testing.T) {
	busy := testutil.Start(t, "/bin/sh", "-c", "while :; do :; done")
	src := &Progress{PID: busy.Pid, Interval: 30 * time.Millisecond}
	ps := pollsOf(src)
	bc := runSource(t, src)
	bc.expectBeat(t, "a busy process runs", 2*time.Second)

	// A stopped process makes no progress at all; the stop itself is a
	// last context switch.
	if err := stopCont(busy.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	bc.quietFor(t, ps, "SIGSTOP", 10)
	if err := syscall.Kill(busy.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	bc.expectBeat(t, "SIGCONT", 2*time.Second)
}

func TestProgressSourceSeesWakeups(t *testing.T) {
	// A shell that sleeps and wakes uses next to no CPU time itself: its
	// context switches are the progress.
	waker := testutil.Start(t, "/bin/sh", "-c", "while :; do sleep 0.05; done")
	bc := runSource(t, &Progress{PID: waker.Pid, Interval: 30 * time.Millisecond})
	for i := range 3 {
		bc.expectBeat(t, fmt.Sprintf("wake-up %d of a sleeping loop", i), 2*time.Second)
	}
}

func TestProgressSourceIdleAndGone(t *testing.T) {
	cmd := exec.Command("/bin/sleep", "30")
	idle := testutil.StartCmd(t, cmd)
	src := &Progress{PID: idle.Pid, Interval: 30 * time.Millisecond}
	ps := pollsOf(src)
	bc := runSource(t, src)
	// Starting up is progress; once asleep in its nanosleep, nothing moves.
	if err := testutil.Eventually(10*time.Second, func() bool {
		sc, err := procfs.ReadSyscall(idle.Pid, idle.Pid)
		return err == nil && !sc.Running && sc.Nr == unix.SYS_CLOCK_NANOSLEEP
	}); err != nil {
		t.Fatal("sleep(1) never went to sleep")
	}
	bc.quietFor(t, ps, "a process asleep", 10)
	cmd.Process.Kill()
	<-idle.Done()
	bc.quietFor(t, ps, "the process is gone", 5) // dying is progress too, before
}
