package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// BenchmarkWorstInputs runs `stallwatch report`, `jit inspect` and an idle
// `watch` on the worst inputs of issue 8's audit and reports the peak RSS
// (peak-MB) and the time (s/run) of each:
//
//   - report/gzip-bomb-14MB: 14 MB of gzip that decompress to 14 GB;
//   - report/sparse-2GB: a 2 GB file; report/dev-zero: /dev/zero;
//   - jit-inspect/tiny-165MB: 2.6 million CODE_LOADs of one byte of code;
//   - jit-inspect/overlap-165MB: as many, over and over 100,000 addresses;
//   - watch-idle/jitdump-165MB: a target whose jitdump is the tiny one,
//     watched until idle (idle-MB: RSS then).
//
// With STALLWATCH_BENCH_BEFORE=<git revision> the same runs are made with
// stallwatch built from that revision (git archive, go build) and reported
// beside as before-peak-MB, before-s and x-less-memory, for example
//
//	STALLWATCH_BENCH_BEFORE=bd16510 go test -run '^$' -bench WorstInputs -count 1 ./cmd/stallwatch | go run ./internal/benchtab
//
// (the revision before the bounds; it takes 7 GB and minutes on the bomb).
func BenchmarkWorstInputs(b *testing.B) {
	in := worstInputs(b)
	after := watchBin.build(b, "stallwatch", ".")
	var before string
	if rev := os.Getenv("STALLWATCH_BENCH_BEFORE"); rev != "" {
		before = buildRevision(b, rev)
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"report/gzip-bomb-14MB", []string{"report", in.bomb}},
		{"report/sparse-2GB", []string{"report", in.sparse}},
		{"report/dev-zero", []string{"report", "/dev/zero"}},
		{"jit-inspect/tiny-165MB", []string{"jit", "inspect", in.tiny}},
		{"jit-inspect/overlap-165MB", []string{"jit", "inspect", in.overlap}},
		{"watch-idle/jitdump-165MB", nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			run := func(bin string) (peakMB, idleMB, secs float64) {
				if c.args == nil {
					return idleWatchJIT(b, bin, in.tiny)
				}
				peakMB, secs = peakRun(b, bin, c.args...)
				return peakMB, 0, secs
			}
			var peak, idle, secs float64
			n := 0
			for b.Loop() {
				p, i, s := run(after)
				peak, idle, secs = max(peak, p), max(idle, i), secs+s
				n++
			}
			b.ReportMetric(peak, "peak-MB")
			b.ReportMetric(secs/float64(n), "s/run")
			if c.args == nil {
				b.ReportMetric(idle, "idle-MB")
			}
			if before != "" {
				p, i, s := run(before)
				b.ReportMetric(p, "before-peak-MB")
				b.ReportMetric(s, "before-s")
				b.ReportMetric(p/peak, "x-less-memory")
				if c.args == nil {
					b.ReportMetric(i, "before-idle-MB")
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

type worstFiles struct{ bomb, sparse, tiny, overlap string }

// worstInputs writes the inputs (350 MB, most of it sparse), removed when
// the benchmark ends.
func worstInputs(b *testing.B) worstFiles {
	b.Helper()
	dir, err := os.MkdirTemp("", "stallwatch-worst-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	f := worstFiles{
		bomb: filepath.Join(dir, "bomb.pb.gz"), sparse: filepath.Join(dir, "sparse.pb.gz"),
		tiny: filepath.Join(dir, "tiny.dump"), overlap: filepath.Join(dir, "overlap.dump"),
	}
	for _, err := range []error{
		writeBomb(f.bomb, 14e6),
		os.WriteFile(f.sparse, nil, 0o644),
		os.Truncate(f.sparse, 2<<30),
		writeTinyJitdump(f.tiny, 165<<20, 0),
		writeTinyJitdump(f.overlap, 165<<20, 100_000),
	} {
		if err != nil {
			b.Fatal(err)
		}
	}
	return f
}

// writeBomb writes gzip members of 64 MiB of zeros until size bytes.
func writeBomb(path string, size int) error {
	var one bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&one, gzip.BestCompression)
	zero := make([]byte, 1<<20)
	for range 64 {
		zw.Write(zero)
	}
	zw.Close()
	return os.WriteFile(path, bytes.Repeat(one.Bytes(), size/one.Len()+1), 0o644)
}

// writeTinyJitdump writes CODE_LOAD records of one byte of code until
// size bytes: at distinct addresses, or cycling over slots addresses.
func writeTinyJitdump(path string, size int64, slots uint64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	le := binary.LittleEndian
	hdr := make([]byte, 40)
	le.PutUint32(hdr[0:], 0x4A695444)
	le.PutUint32(hdr[4:], 1)
	le.PutUint32(hdr[8:], 40)
	le.PutUint32(hdr[12:], 62)
	le.PutUint32(hdr[20:], 1)
	w.Write(hdr)
	n := int64(len(hdr))
	for i := uint64(0); n < size; i++ {
		name := "f" + strconv.FormatUint(i, 10)
		addr := 0x100000 + i*16
		if slots > 0 {
			addr = 0x100000 + (i*7919)%slots*16
		}
		rec := make([]byte, 56+len(name)+1+1)
		le.PutUint32(rec[4:], uint32(len(rec)))
		le.PutUint64(rec[8:], 1000+i)
		le.PutUint64(rec[24:], addr)
		le.PutUint64(rec[32:], addr)
		le.PutUint64(rec[40:], 1)
		le.PutUint64(rec[48:], i)
		copy(rec[56:], name)
		w.Write(rec)
		n += int64(len(rec))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// rssCap is where peakRun stops a run: the code before the bounds took
// 20 GB and more on the gzip bomb, which a shared machine cannot give.
const rssCap = 4 << 30

// peakRun runs bin with args to its end (or until its RSS passes rssCap)
// and returns its peak RSS (MB) and how long it took. Failing (a refused
// input) is expected; a run stopped at the cap says so.
func peakRun(b *testing.B, bin string, args ...string) (peakMB, secs float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = nil, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	capped := make(chan bool, 1)
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				capped <- false
				return
			case <-tick.C:
				if rssBytes(cmd.Process.Pid) > rssCap {
					cmd.Process.Kill()
					capped <- true
					return
				}
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	stopped := <-capped
	secs = time.Since(start).Seconds()
	if ctx.Err() != nil {
		b.Fatalf("%s %v: still running after 15 minutes", bin, args)
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		b.Fatal(err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	what := firstLine(stderr.String())
	if stopped {
		what = fmt.Sprintf("stopped at the %d GiB cap: it would have taken more", rssCap>>30)
	}
	b.Logf("%s %s: %.1f s, peak %d MB: %s", filepath.Base(filepath.Dir(bin)), strings.Join(args, " "), secs, ru.Maxrss>>10, what)
	return float64(ru.Maxrss) / 1024, secs
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// idleWatchJIT watches a sleeping target whose jitdump is the file jit
// (copied to /tmp/jit-<pid>.dump) until stallwatch is watching, and
// returns its peak RSS since start, its RSS once idle, and how long it
// took to be watching.
func idleWatchJIT(b *testing.B, bin, jit string) (peakMB, idleMB, secs float64) {
	target := testutil.Start(b, "sleep", "3600")
	dump := fmt.Sprintf("/tmp/jit-%d.dump", target.Pid)
	if err := os.Link(jit, dump); err != nil {
		data, rerr := os.ReadFile(jit)
		if rerr != nil {
			b.Fatal(rerr)
		}
		if err := os.WriteFile(dump, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	defer os.Remove(dump)
	// The jitdump must be newer than the process to be its own.
	now := time.Now()
	os.Chtimes(dump, now, now)
	start := time.Now()
	sw := testutil.Start(b, bin, "watch", "--pid", strconv.Itoa(target.Pid), "--heartbeat-proc",
		"--stall-after", "1h", "--baseline-freq", "0", "--out", b.TempDir())
	if err := testutil.Eventually(10*time.Minute, func() bool { return strings.Contains(sw.Stderr(), "watching") }); err != nil {
		b.Fatalf("stallwatch never started watching; log:\n%s", sw.Stderr())
	}
	secs = time.Since(start).Seconds()
	pid := sw.Cmd.Process.Pid
	// Idle: the RSS a second after it said so (a measurement, not a
	// wait for anything), when the garbage of reading the symbols is
	// returned.
	time.Sleep(time.Second)
	idleMB, peakMB = memMB(b, pid)
	_ = sw.Cmd.Process.Signal(syscall.SIGTERM)
	<-sw.Done()
	b.Logf("%s watch: watching after %.1f s, peak %.0f MB, idle %.0f MB", filepath.Base(filepath.Dir(bin)), secs, peakMB, idleMB)
	return peakMB, idleMB, secs
}

// buildRevision builds stallwatch as it was at git revision rev.
func buildRevision(b *testing.B, rev string) string {
	b.Helper()
	dir, err := os.MkdirTemp("", "stallwatch-before-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	root := testutil.RepoRoot(b)
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %q | tar -x -C %q", root, rev, dir))
	if out, err := archive.CombinedOutput(); err != nil {
		b.Fatalf("git archive %s: %v\n%s", rev, err, out)
	}
	bin := filepath.Join(dir, "stallwatch")
	build := exec.Command("go", "build", "-o", bin, "./cmd/stallwatch")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build at %s: %v\n%s", rev, err, out)
	}
	return bin
}

// rssBytes is the resident memory of pid now, 0 when it cannot be read
// (the process just ended).
func rssBytes(pid int) int64 {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
