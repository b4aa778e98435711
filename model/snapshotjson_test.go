package model

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// testSnapshot has every field threads.json keeps, and a thread for each
// error the snapshot makes.
func testSnapshot() *Snapshot {
	exe := &Mapping{Start: 0x400000, Limit: 0x500000, Offset: 0x1000, File: "/usr/bin/app", BuildID: "aa11", Kind: KindNative, HasFunctions: true, HasLineNumbers: true}
	kern := &Mapping{Start: 0xffffffff81000000, Limit: 0xffffffff83000000, File: KernelMapping, Kind: KindKernel, HasFunctions: true}
	futex := &Location{Addr: 0xffffffff81100010, Mapping: kern, Kind: KindKernel, Lines: []Line{{Function: "futex_wait_queue", SystemName: "futex_wait_queue"}}}
	work := &Location{Addr: 0x401234, Mapping: exe, Kind: KindNative, Lines: []Line{
		{Function: "hash", SystemName: "_Z4hashv", File: "/src/hash.h", Line: 30},
		{Function: "work", SystemName: "work", File: "/src/app.c", Line: 12}}}
	jit := &Location{Addr: 0x7f0000001000, Kind: KindJIT, Lines: []Line{{Function: "handler", SystemName: "JS:*handler app.js:3", File: "app.js", Line: 3}}}
	thread := func(tid int, state byte, err error) Thread {
		return Thread{TID: tid, Name: fmt.Sprint("t", tid), State: state, Wchan: "futex_wait_queue",
			VoluntarySwitches: 3, InvoluntarySwitches: 1, RunTime: time.Second, RunqueueWait: time.Millisecond,
			OffCPUFor: 2 * time.Second, OffCPUKnown: true, OffCPUSource: "sched",
			Kernel: []*Location{futex}, User: []*Location{work, jit}, UserAddrs: []uint64{0x401234, 0x7f0000001000},
			Unwinder: "cfi+fp", Stopped: true, Stop: time.Microsecond, Err: err}
	}
	threads := []Thread{
		thread(10, 'S', nil),
		thread(11, 'R', ErrRunning),
		thread(12, 'S', errors.Join(&ReadError{File: "wchan", Err: errors.New("no such file")}, ErrExited)),
		thread(13, 't', &TracedError{TID: 13, Tracer: 99, TracerName: "gdb"}),
		thread(14, 'S', fmt.Errorf("unwinding: %w", ErrRunning)),
		thread(15, 'S', errors.New("an error the model does not type")),
		thread(16, 'S', &RefusedError{PID: 10, TID: 16, Err: syscall.EPERM, Why: "Yama ptrace_scope 3"}),
	}
	threads[0].Syscall = &Syscall{Nr: 202, Name: "futex", Args: [6]uint64{0x7ffd0010, 0x80, 2}, Desc: "futex(0x7ffd0010, FUTEX_WAIT_PRIVATE, 2)"}
	threads[0].Wait = &Wait{Kind: "mutex", Addr: 0x7ffd0010, Owner: 11, Desc: "pthread mutex 0x7ffd0010 held by tid 11"}
	threads[1].Wait = &Wait{Kind: "join", Owner: 10, Desc: "pthread_join of tid 10"}
	threads[2].Wait = &Wait{Kind: "mutex", Addr: 0x7ffd0010, Owner: 11}
	threads[4].Syscall = &Syscall{Nr: 1, Name: "write", Args: [6]uint64{7}, Desc: "write(fd 7 → pipe:[4411] read by pid 812 (logger), which is stopped)"}
	threads[4].Wait = &Wait{Kind: "fd", Desc: "write() on fd 7 → pipe:[4411] read by pid 812 (logger), which is stopped", On: &WaitTarget{
		FD: 7, Kind: "pipe", Desc: "pipe:[4411] read by pid 812 (logger), which is stopped",
		Peers: []WaitPeer{{PID: 812, Name: "logger", FD: 0, State: "stopped"}, {PID: 10, FD: 8, Self: true}}}}
	threads[5].Wait = &Wait{Kind: "fd", On: &WaitTarget{FD: 3, Kind: "socket", Proto: "TCPv6", Local: "[::1]:40122", Remote: "[::1]:5432",
		State: "ESTABLISHED", RecvQ: 1, SendQ: 2, NotAccepted: true, Path: "", Device: "vda", DevMajor: 254}}
	return &Snapshot{
		PID: 10, Command: []string{"/usr/bin/app", "--serve"},
		Time: time.Date(2026, 1, 5, 14, 30, 12, 0, time.UTC), Mono: 123456789, Duration: 3 * time.Millisecond,
		Threads: threads, Locks: BuildLockGraph(threads),
		PtraceUsed: true, PtraceErr: ErrOwnProcess, MaxStop: time.Millisecond, TargetExited: true,
		Notes: []string{"a note"},
	}
}

func roundTrip(t *testing.T, snap *Snapshot) (*Snapshot, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSnapshotJSON(&buf, snap); err != nil {
		t.Fatal(err)
	}
	js := append([]byte(nil), buf.Bytes()...)
	got, err := ReadSnapshotJSON(&buf, "threads.json")
	if err != nil {
		t.Fatal(err)
	}
	return got, js
}

func TestSnapshotJSONRoundTrip(t *testing.T) {
	snap := testSnapshot()
	got, js := roundTrip(t, snap)
	if !strings.Contains(string(js), `"addr": "0xffffffff81100010"`) {
		t.Error("kernel addresses must be hex strings (JSON numbers lose their low bits)")
	}
	// Errors are compared by what they answer (below); the rest must be
	// what was written.
	strip := func(s *Snapshot) Snapshot {
		c := *s
		c.PtraceErr = nil
		c.Threads = append([]Thread(nil), s.Threads...)
		for i := range c.Threads {
			c.Threads[i].Err = nil
		}
		return c
	}
	if a, b := strip(snap), strip(got); !reflect.DeepEqual(a, b) {
		t.Errorf("round trip changed the snapshot:\n%+v\nvs\n%+v", a, b)
	}
}

// TestWaitSubject: threads waiting on the same thing have one subject,
// whatever descriptor or local port each uses.
func TestWaitSubject(t *testing.T) {
	pg := []WaitPeer{{PID: 812, Name: "postgres", FD: 9, State: "sleeping"}}
	tests := []struct {
		w    Wait
		want string
	}{
		{Wait{On: &WaitTarget{FD: 5, Kind: "socket", Proto: "TCP", Local: "10.0.0.7:40122", Remote: "10.0.0.5:5432", Peers: pg}}, "TCP 10.0.0.5:5432 — pid 812 (postgres)"},
		{Wait{On: &WaitTarget{FD: 6, Kind: "socket", Proto: "TCP", Local: "10.0.0.7:40124", Remote: "10.0.0.5:5432", RecvQ: 7, Peers: pg}}, "TCP 10.0.0.5:5432 — pid 812 (postgres)"},
		{Wait{On: &WaitTarget{Kind: "socket", Proto: "TCPv6", Local: "[::]:8080", Remote: "[::]:0", State: "LISTEN"}}, "TCP listening on [::]:8080"},
		{Wait{On: &WaitTarget{Kind: "socket", Proto: "UNIX-STREAM", PeerName: "/run/app.sock", Peers: pg}}, "UNIX /run/app.sock — pid 812 (postgres)"},
		{Wait{On: &WaitTarget{Kind: "pipe", Peers: []WaitPeer{{PID: 9, Name: "logger", State: "stopped"}}}}, "a pipe — pid 9 (logger)"},
		{Wait{On: &WaitTarget{Kind: "file", Path: "/var/lib/db", Device: "vda"}}, "file /var/lib/db on vda"},
		{Wait{Kind: "mutex", Owner: 12}, "a lock held by tid 12"},
		{Wait{Kind: "sleep", Desc: "a timeout: nanosleep(1s)"}, "a timeout"},
	}
	for _, tt := range tests {
		if got := tt.w.Subject(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.w, got, tt.want)
		}
	}
}

// TestSnapshotJSONErrorsTyped: a snapshot read back from threads.json
// answers errors.Is and errors.As as the one written did, and says the
// same words.
func TestSnapshotJSONErrorsTyped(t *testing.T) {
	snap := testSnapshot()
	got, _ := roundTrip(t, snap)
	if !errors.Is(got.PtraceErr, ErrOwnProcess) {
		t.Errorf("PtraceErr %v: not ErrOwnProcess", got.PtraceErr)
	}
	type answers struct {
		text                string
		exited, running     bool
		traced, refused     bool
		readFile, tracer    string
		refusedErrno        syscall.Errno
		refusedPID, tracerP int
	}
	answer := func(err error) answers {
		a := answers{text: errText(err), exited: errors.Is(err, ErrExited), running: errors.Is(err, ErrRunning)}
		var te *TracedError
		if a.traced = errors.As(err, &te); a.traced {
			a.tracer, a.tracerP = te.TracerName, te.Tracer
		}
		var re *RefusedError
		if a.refused = errors.As(err, &re); a.refused {
			a.refusedPID = re.PID
			errors.As(re.Err, &a.refusedErrno)
		}
		var rd *ReadError
		if errors.As(err, &rd) {
			a.readFile = rd.File
		}
		return a
	}
	for i := range snap.Threads {
		want, have := answer(snap.Threads[i].Err), answer(got.Threads[i].Err)
		if want != have {
			t.Errorf("thread %d: written %+v, read back %+v", snap.Threads[i].TID, want, have)
		}
	}
	if !errors.Is(got.Threads[6].Err, syscall.EPERM) {
		t.Errorf("the refusal's errno is lost: %v", got.Threads[6].Err)
	}
}

// TestReadSnapshotJSONWithoutErrorRecords: a threads.json written before
// the error records were still reads, its errors as their text.
func TestReadSnapshotJSONWithoutErrorRecords(t *testing.T) {
	in := `{"schema":1,"pid":7,"ptrace_error":"no permission","threads":[{"tid":7,"error":"exited during the snapshot"}]}`
	snap, err := ReadSnapshotJSON(strings.NewReader(in), "old.json")
	if err != nil {
		t.Fatal(err)
	}
	if errText(snap.PtraceErr) != "no permission" || errText(snap.Threads[0].Err) != "exited during the snapshot" {
		t.Errorf("errors %q, %q", errText(snap.PtraceErr), errText(snap.Threads[0].Err))
	}
	var rec RecordedError
	if !errors.As(snap.Threads[0].Err, &rec) {
		t.Errorf("%T: an error known by its text alone must be a RecordedError", snap.Threads[0].Err)
	}
}

func TestReadSnapshotJSONErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"not json", `{"schema": 1, "threads": [`, "dump.json: offset"},
		{"other schema", `{"schema": 7}`, "schema 7"},
		{"bad address", `{"schema":1,"threads":[{"tid":1,"kernel":[{"addr":"12","mapping":-1}]}]}`, "thread 1: kernel frame 0"},
		{"address past 64 bits", `{"schema":1,"threads":[{"tid":1,"user_addrs":["0x10000000000000000"]}]}`, "thread 1: user address 0"},
		{"mapping out of range", `{"schema":1,"threads":[{"tid":1,"user":[{"addr":"0x1","mapping":3}]}]}`, "mapping 3 of 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadSnapshotJSON(strings.NewReader(tt.in), "dump.json")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want %q", err, tt.want)
			}
		})
	}
}

func FuzzReadSnapshotJSON(f *testing.F) {
	var buf bytes.Buffer
	if err := WriteSnapshotJSON(&buf, testSnapshot()); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`{"schema":1,"threads":[{"tid":1,"user":[{"addr":"0x1","mapping":0}]}],"mappings":[{"start":"0x0","limit":"0x10","offset":"0x0"}]}`))
	f.Add([]byte(`{"schema":1,"threads":[{"tid":1,"errors":[{"kind":"refused","text":"x","errno":-1},{"kind":"read"},{"kind":"traced","text":""}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var snap *Snapshot
		var err error
		if n := testutil.HeapBytes(func() { snap, err = ReadSnapshotJSON(bytes.NewReader(data), "fuzz.json") }); n > 64*uint64(len(data))+4<<20 {
			t.Fatalf("reading %d bytes allocated %d", len(data), n)
		}
		if err != nil {
			return
		}
		// What reads writes back as what reads the same.
		var once, twice bytes.Buffer
		if err := WriteSnapshotJSON(&once, snap); err != nil {
			t.Fatal(err)
		}
		again, err := ReadSnapshotJSON(bytes.NewReader(once.Bytes()), "again.json")
		if err != nil {
			t.Fatalf("a dump written from what was read does not read: %v\n%s", err, once.Bytes())
		}
		if err := WriteSnapshotJSON(&twice, again); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(once.Bytes(), twice.Bytes()) {
			t.Fatalf("written, read and written again differs:\n%s\n%s", once.Bytes(), twice.Bytes())
		}
	})
}
