package sampler

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

var testLayouts = map[uint64]layout{
	1: {},                                  // on-CPU, no dump
	2: {nregs: userRegsCount, stack: true}, // off-CPU with dump
}

func lookupLayout(id uint64) (layout, bool) {
	l, ok := testLayouts[id]
	return l, ok
}

func TestDecodeSample(t *testing.T) {
	chain := []uint64{contextKernel, 0xffffffff81000010, 0xffffffff81000020, contextUser, 0x401000, 0x401100}
	dump := bytes.Repeat([]byte{0xab}, 64)
	cases := []struct {
		name    string
		rec     []byte
		wantErr string
		check   func(t *testing.T, r record)
	}{
		{
			name: "on-CPU with kernel and user frames",
			rec:  encodeSample(testSample{id: 1, ip: 0xffffffff81000010, pid: 10, tid: 11, time: 1234, cpu: 1, period: 1003009, chain: chain}),
			check: func(t *testing.T, r record) {
				if r.pid != 10 || r.tid != 11 || r.time != 1234 || r.cpu != 1 || r.period != 1003009 {
					t.Errorf("fields %+v", r)
				}
				stack, k := callchain(r.chain, nil)
				want := []uint64{0xffffffff81000010, 0xffffffff81000020, 0x401000, 0x401100}
				if !reflect.DeepEqual(stack, want) || k != 2 {
					t.Errorf("stack %x kernel %d, want %x kernel 2", stack, k, want)
				}
			},
		},
		{
			name: "off-CPU with registers and a stack dump cut to dyn_size",
			rec:  encodeSample(testSample{id: 2, tid: 5, chain: chain[:3], regs: []uint64{0x7ff0, 0x7fe0, 0x401234}, stack: dump, dyn: 40}),
			check: func(t *testing.T, r record) {
				if got := decodeRegs(r.regs); userRegsCount > 0 && (got != UserRegs{BP: 0x7ff0, SP: 0x7fe0, IP: 0x401234}) {
					t.Errorf("regs %+v", got)
				}
				if len(r.stackDump) != 40 {
					t.Errorf("stack dump %d bytes, want dyn_size 40", len(r.stackDump))
				}
			},
		},
		{
			name: "empty stack dump has no dyn_size",
			rec:  encodeSample(testSample{id: 2, chain: nil, regs: []uint64{1, 2, 3}, stack: []byte{}}),
			check: func(t *testing.T, r record) {
				if len(r.stackDump) != 0 || len(r.chain) != 0 {
					t.Errorf("%+v", r)
				}
			},
		},
		{name: "unknown event", rec: encodeSample(testSample{id: 9}), wantErr: "unknown event id 9"},
		{name: "truncated", rec: encodeSample(testSample{id: 1, chain: chain})[:40], wantErr: "header says"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := decodeRecord(c.rec, lookupLayout)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, r)
		})
	}
}

// Sizes inside a record are never trusted beyond the record.
func TestDecodeRejectsLyingSizes(t *testing.T) {
	rec := encodeSample(testSample{id: 1, chain: []uint64{contextUser, 1, 2}})
	// nr is at offset 8 (header) + 8 id + 8 ip + 8 pid/tid + 8 time + 8 cpu + 8 period.
	for _, nr := range []uint64{4, 1 << 20, 1<<64 - 1} {
		b := append([]byte(nil), rec...)
		(&enc{b: b[:56]}).u64(nr)
		if _, err := decodeRecord(b, lookupLayout); err == nil {
			t.Errorf("callchain nr %d in a %d-byte record decoded", nr, len(b))
		}
	}
	dump := encodeSample(testSample{id: 2, regs: []uint64{1, 2, 3}, stack: make([]byte, 16), dyn: 16})
	sizeAt := len(dump) - 8 - 16 - 8
	for _, size := range []uint64{17, 1 << 40} {
		b := append([]byte(nil), dump...)
		(&enc{b: b[:sizeAt]}).u64(size)
		if _, err := decodeRecord(b, lookupLayout); err == nil {
			t.Errorf("stack size %d decoded", size)
		}
	}
}

func TestDecodeSideRecords(t *testing.T) {
	tr := trailer{pid: 10, tid: 12, time: 777, cpu: 1, id: 3}
	cases := []struct {
		name string
		rec  []byte
		want record
	}{
		{"switch out preempted", encodeSwitch(true, true, tr), record{typ: recSwitch, misc: miscSwitchOut | miscSwitchOutPreempt}},
		{"switch in", encodeSwitch(false, false, tr), record{typ: recSwitch}},
		{"lost", encodeLost(3, 42, tr), record{typ: recLost, lost: 42}},
		{"fork", encodeTask(recFork, 10, 10, 13, 12, tr), record{typ: recFork, taskPid: 10, parentPid: 10, taskTid: 13, parentTid: 12}},
		{"exit", encodeTask(recExit, 10, 10, 12, 12, tr), record{typ: recExit, taskPid: 10, parentPid: 10, taskTid: 12, parentTid: 12}},
		{"comm", encodeComm(10, 12, "worker-1", tr), record{typ: recComm, comm: "worker-1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := decodeRecord(c.rec, lookupLayout)
			if err != nil {
				t.Fatal(err)
			}
			c.want.pid, c.want.tid, c.want.time, c.want.cpu, c.want.id = tr.pid, tr.tid, tr.time, tr.cpu, tr.id
			if !reflect.DeepEqual(r, c.want) {
				t.Errorf("got %+v\nwant %+v", r, c.want)
			}
		})
	}
	if _, err := decodeRecord(finish(recSwitch, 0, make([]byte, 8)), lookupLayout); err == nil {
		t.Error("a side record without its trailer decoded")
	}
}

func TestCallchain(t *testing.T) {
	cases := []struct {
		name   string
		chain  []uint64
		want   []uint64
		kernel int
	}{
		{"user only", []uint64{contextUser, 1, 2, 3}, []uint64{1, 2, 3}, 0},
		{"kernel only", []uint64{contextKernel, 9, 8}, []uint64{9, 8}, 2},
		{"both", []uint64{contextKernel, 9, contextUser, 1}, []uint64{9, 1}, 1},
		{"guest context skipped", []uint64{^uint64(2048) + 1, 5, contextUser, 1}, []uint64{1}, 0},
		{"kernel after user dropped", []uint64{contextUser, 1, contextKernel, 9}, []uint64{1}, 0},
		{"empty", nil, []uint64{}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := &enc{}
			for _, v := range c.chain {
				raw.u64(v)
			}
			got, k := callchain(raw.b, nil)
			if len(got) == 0 && len(c.want) == 0 && k == c.kernel {
				return
			}
			if !reflect.DeepEqual(got, c.want) || k != c.kernel {
				t.Errorf("got %v kernel %d, want %v kernel %d", got, k, c.want, c.kernel)
			}
		})
	}
}
