package testutil

import (
	"bufio"
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// PerfStack is one sample of `perf script`: its thread and its user
// frames' function names, innermost first ("[unknown]" where perf named
// none); kernel frames are left out.
type PerfStack struct {
	TID    int
	Frames []string
	// Addrs are the frames' addresses as perf script prints them: in a
	// file's mapping, the offset in the file.
	Addrs []uint64
}

// PerfDwarf records pid with `perf record --call-graph dwarf` (copying
// copy bytes of stack per sample, as stallwatch's --stack-copy does) at
// freq for secs seconds of the given command (`sleep N`), and returns its
// samples as perf script prints them: the reference an unwinder is
// compared with.
func PerfDwarf(t testing.TB, pid, freq, copy int, secs string, dir string) []PerfStack {
	t.Helper()
	return StartPerfDwarf(t, pid, freq, copy, secs, dir).Stacks(t)
}

// PerfDwarfRun is a perf record started by StartPerfDwarf, running beside
// what the test records itself: both see the same seconds of the target.
type PerfDwarfRun struct {
	perf, data string
	cmd        *exec.Cmd
	out        bytes.Buffer
}

// StartPerfDwarf starts what PerfDwarf does and returns at once.
func StartPerfDwarf(t testing.TB, pid, freq, copy int, secs string, dir string) *PerfDwarfRun {
	t.Helper()
	r := &PerfDwarfRun{perf: RequireTool(t, "perf"), data: dir + "/perf.data"}
	r.cmd = exec.Command(r.perf, "record", "-q", "-F", strconv.Itoa(freq), "--call-graph", "dwarf,"+strconv.Itoa(copy),
		"-k", "mono", "-o", r.data, "-p", strconv.Itoa(pid), "--", "sleep", secs)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("perf record: %v", err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
	})
	return r
}

// Stacks waits for the recording to end and returns its samples.
func (r *PerfDwarfRun) Stacks(t testing.TB) []PerfStack {
	t.Helper()
	if err := r.cmd.Wait(); err != nil {
		t.Fatalf("perf record: %v\n%s", err, r.out.String())
	}
	out, err := exec.Command(r.perf, "script", "-i", r.data, "-F", "tid,ip,sym", "--no-inline").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	return ParsePerfScript(out)
}

// ParsePerfScript reads perf script's output of "-F tid,ip,sym": a line
// with the thread id, then one line per frame ("ADDR SYMBOL+OFF"), then a
// blank line.
func ParsePerfScript(out []byte) []PerfStack {
	var stacks []PerfStack
	var cur *PerfStack
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
			cur = nil
		case cur == nil:
			tid, err := strconv.Atoi(strings.Fields(line)[0])
			if err != nil {
				continue
			}
			stacks = append(stacks, PerfStack{TID: tid})
			cur = &stacks[len(stacks)-1]
		default:
			ip, sym, _ := strings.Cut(line, " ")
			addr, err := strconv.ParseUint(ip, 16, 64)
			if err == nil && addr >= kernelSpace {
				continue
			}
			if i := strings.LastIndex(sym, "+0x"); i > 0 {
				sym = sym[:i]
			}
			cur.Frames = append(cur.Frames, strings.TrimSpace(sym))
			cur.Addrs = append(cur.Addrs, addr)
		}
	}
	return stacks
}

// kernelSpace is where the x86-64 kernel half of the address space begins.
const kernelSpace = 0xffff800000000000
