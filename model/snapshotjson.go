package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"
)

// The JSON form of a Snapshot (threads.json in a capture, `stallwatch
// snapshot --format json`). Addresses are hex strings: kernel addresses do
// not fit the 53 bits a JSON number keeps in most readers. Durations are
// nanoseconds. Errors are written twice: as the text a person reads
// ("error", "ptrace_error"), and one record per error errors.Join put
// together ("errors", "ptrace_errors": jsonError), so that a snapshot read
// back still answers errors.Is and errors.As as the one written did.
type jsonDump struct {
	Schema       int           `json:"schema"`
	PID          int           `json:"pid"`
	Command      []string      `json:"command,omitempty"`
	Time         time.Time     `json:"time"`
	Mono         uint64        `json:"mono_ns"`
	Duration     int64         `json:"duration_ns"`
	PtraceUsed   bool          `json:"ptrace_used"`
	PtraceError  string        `json:"ptrace_error,omitempty"`
	PtraceErrors []jsonError   `json:"ptrace_errors,omitempty"`
	MaxStop      int64         `json:"max_stop_ns"`
	TargetExited bool          `json:"target_exited"`
	Notes        []string      `json:"notes,omitempty"`
	Locks        jsonLocks     `json:"locks"`
	Mappings     []jsonMapping `json:"mappings"`
	Threads      []jsonThread  `json:"threads"`
}

const dumpSchema = 1

type jsonLocks struct {
	Edges  []snapshotEdge `json:"edges"`
	Cycles [][]int        `json:"cycles"`
	Chains [][]int        `json:"chains"`
}

type snapshotEdge struct {
	From int    `json:"from"`
	To   int    `json:"to"`
	Via  string `json:"via,omitempty"`
}

type jsonMapping struct {
	Start           string `json:"start"`
	Limit           string `json:"limit"`
	Offset          string `json:"offset"`
	File            string `json:"file"`
	BuildID         string `json:"build_id,omitempty"`
	Kind            string `json:"kind"`
	HasFunctions    bool   `json:"has_functions,omitempty"`
	HasFilenames    bool   `json:"has_filenames,omitempty"`
	HasLineNumbers  bool   `json:"has_line_numbers,omitempty"`
	HasInlineFrames bool   `json:"has_inline_frames,omitempty"`
}

type jsonThread struct {
	TID                 int          `json:"tid"`
	Name                string       `json:"name"`
	State               string       `json:"state"`
	StateName           string       `json:"state_name"`
	Wchan               string       `json:"wchan,omitempty"`
	TracerPID           int          `json:"tracer_pid,omitempty"`
	Tracer              string       `json:"tracer,omitempty"`
	Syscall             *jsonSyscall `json:"syscall,omitempty"`
	VoluntarySwitches   uint64       `json:"voluntary_switches"`
	InvoluntarySwitches uint64       `json:"involuntary_switches"`
	RunTime             int64        `json:"run_time_ns"`
	RunqueueWait        int64        `json:"runqueue_wait_ns"`
	OffCPUFor           *int64       `json:"off_cpu_ns,omitempty"` // absent when not known
	OffCPUSource        string       `json:"off_cpu_source,omitempty"`
	Kernel              []jsonFrame  `json:"kernel"`
	User                []jsonFrame  `json:"user"`
	UserAddrs           []string     `json:"user_addrs,omitempty"`
	Unwinder            string       `json:"unwinder,omitempty"`
	Stopped             bool         `json:"stopped"`
	Stop                int64        `json:"stop_ns"`
	Wait                *jsonWait    `json:"wait,omitempty"`
	Err                 string       `json:"error,omitempty"`
	Errs                []jsonError  `json:"errors,omitempty"`
}

type jsonSyscall struct {
	Nr   int       `json:"nr"`
	Name string    `json:"name,omitempty"`
	Args [6]string `json:"args"`
	Desc string    `json:"desc,omitempty"`
}

type jsonWait struct {
	Kind      string      `json:"kind"`
	Addr      string      `json:"addr,omitempty"`
	Owner     int         `json:"owner,omitempty"`
	Desc      string      `json:"desc,omitempty"`
	OwnerSite string      `json:"owner_site,omitempty"`
	On        *WaitTarget `json:"on,omitempty"`
}

type jsonFrame struct {
	Addr string `json:"addr"`
	Kind string `json:"kind"`
	// Module is the mapping's file, for people reading the JSON; Mapping
	// indexes the dump's mappings (-1: none).
	Module  string     `json:"module,omitempty"`
	Mapping int        `json:"mapping"`
	Lines   []jsonLine `json:"lines"`
}

type jsonLine struct {
	Function   string `json:"function"`
	SystemName string `json:"system_name,omitempty"`
	File       string `json:"file,omitempty"`
	Line       int64  `json:"line,omitempty"`
}

// WriteSnapshotJSON writes snap as one JSON document: every field of the
// Snapshot but the unwinder's own (UserExact, UserCut: the stack's last
// frame says why it ends), stacks as frames with their lines, mappings in
// a table.
func WriteSnapshotJSON(w io.Writer, snap *Snapshot) error {
	if snap == nil {
		return errors.New("model: WriteSnapshotJSON: nil snapshot")
	}
	d := toJSONDump(snap)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(d)
}

func toJSONDump(snap *Snapshot) *jsonDump {
	d := &jsonDump{
		Schema:       dumpSchema,
		PID:          snap.PID,
		Command:      snap.Command,
		Time:         snap.Time,
		Mono:         snap.Mono,
		Duration:     int64(snap.Duration),
		PtraceUsed:   snap.PtraceUsed,
		PtraceError:  errText(snap.PtraceErr),
		PtraceErrors: errorRecords(snap.PtraceErr),
		MaxStop:      int64(snap.MaxStop),
		TargetExited: snap.TargetExited,
		Notes:        snap.Notes,
		Locks: jsonLocks{
			Edges:  []snapshotEdge{},
			Cycles: nonNil(snap.Locks.Cycles),
			Chains: nonNil(snap.Locks.Chains),
		},
		Mappings: []jsonMapping{},
		Threads:  make([]jsonThread, 0, len(snap.Threads)),
	}
	for _, e := range snap.Locks.Edges {
		d.Locks.Edges = append(d.Locks.Edges, snapshotEdge(e))
	}
	maps := map[*Mapping]int{}
	frames := func(locs []*Location) []jsonFrame {
		out := make([]jsonFrame, 0, len(locs))
		for _, l := range locs {
			if l == nil {
				continue
			}
			f := jsonFrame{Addr: hex(l.Addr), Kind: l.Kind.String(), Mapping: -1, Lines: make([]jsonLine, 0, len(l.Lines))}
			if m := l.Mapping; m != nil {
				i, ok := maps[m]
				if !ok {
					i = len(d.Mappings)
					maps[m] = i
					d.Mappings = append(d.Mappings, jsonMapping{
						Start: hex(m.Start), Limit: hex(m.Limit), Offset: hex(m.Offset),
						File: m.File, BuildID: m.BuildID, Kind: m.Kind.String(),
						HasFunctions: m.HasFunctions, HasFilenames: m.HasFilenames,
						HasLineNumbers: m.HasLineNumbers, HasInlineFrames: m.HasInlineFrames,
					})
				}
				f.Mapping = i
				f.Module = m.File
			}
			for _, ln := range l.Lines {
				f.Lines = append(f.Lines, jsonLine(ln))
			}
			out = append(out, f)
		}
		return out
	}
	for i := range snap.Threads {
		t := &snap.Threads[i]
		jt := jsonThread{
			TID: t.TID, Name: t.Name, State: stateLetter(t.State), StateName: StateName(t.State),
			Wchan: t.Wchan, TracerPID: t.TracerPID, Tracer: t.Tracer,
			VoluntarySwitches: t.VoluntarySwitches, InvoluntarySwitches: t.InvoluntarySwitches,
			RunTime: int64(t.RunTime), RunqueueWait: int64(t.RunqueueWait), OffCPUSource: t.OffCPUSource,
			Kernel: frames(t.Kernel), User: frames(t.User), Unwinder: t.Unwinder,
			Stopped: t.Stopped, Stop: int64(t.Stop), Err: errText(t.Err), Errs: errorRecords(t.Err),
		}
		if t.OffCPUKnown {
			v := int64(t.OffCPUFor)
			jt.OffCPUFor = &v
		}
		if sc := t.Syscall; sc != nil {
			js := &jsonSyscall{Nr: sc.Nr, Name: sc.Name, Desc: sc.Desc}
			for j, a := range sc.Args {
				js.Args[j] = hex(a)
			}
			jt.Syscall = js
		}
		for _, a := range t.UserAddrs {
			jt.UserAddrs = append(jt.UserAddrs, hex(a))
		}
		if wt := t.Wait; wt != nil {
			jw := &jsonWait{Kind: wt.Kind, Owner: wt.Owner, Desc: wt.Desc, OwnerSite: wt.OwnerSite, On: wt.On}
			if wt.Addr != 0 {
				jw.Addr = hex(wt.Addr)
			}
			jt.Wait = jw
		}
		d.Threads = append(d.Threads, jt)
	}
	return d
}

func nonNil(v [][]int) [][]int {
	if v == nil {
		return [][]int{}
	}
	return v
}

func hex(v uint64) string { return "0x" + strconv.FormatUint(v, 16) }

func stateLetter(s byte) string {
	if s == 0 {
		return ""
	}
	return string(rune(s))
}

// MaxSnapshotJSON bounds what ReadSnapshotJSON reads: a dump of 100,000
// threads with deep stacks stays well below it.
const MaxSnapshotJSON = 512 << 20

// ReadSnapshotJSON reads what WriteSnapshotJSON wrote back into a
// snapshot, so that a capture can be rendered again later. name is used in
// errors.
func ReadSnapshotJSON(r io.Reader, name string) (*Snapshot, error) {
	var d jsonDump
	lr := &io.LimitedReader{R: r, N: MaxSnapshotJSON + 1}
	dec := json.NewDecoder(lr)
	if err := dec.Decode(&d); err != nil {
		if lr.N <= 0 {
			return nil, fmt.Errorf("%s: larger than %d MiB, not a thread dump", name, MaxSnapshotJSON>>20)
		}
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("%s: offset %d: %v", name, se.Offset, err)
		}
		return nil, fmt.Errorf("%s: offset %d: %v", name, dec.InputOffset(), err)
	}
	if d.Schema != dumpSchema {
		return nil, fmt.Errorf("%s: thread dump schema %d, this stallwatch reads %d", name, d.Schema, dumpSchema)
	}
	return fromJSONDump(&d, name)
}

func fromJSONDump(d *jsonDump, name string) (*Snapshot, error) {
	snap := &Snapshot{
		PID: d.PID, Command: d.Command, Time: d.Time, Mono: d.Mono,
		Duration: time.Duration(d.Duration), PtraceUsed: d.PtraceUsed, PtraceErr: readErrors(d.PtraceErrors, d.PtraceError),
		MaxStop: time.Duration(d.MaxStop), TargetExited: d.TargetExited, Notes: d.Notes,
		Locks: LockGraph{Cycles: d.Locks.Cycles, Chains: d.Locks.Chains},
	}
	for _, e := range d.Locks.Edges {
		snap.Locks.Edges = append(snap.Locks.Edges, Edge(e))
	}
	maps := make([]*Mapping, len(d.Mappings))
	for i, jm := range d.Mappings {
		m := &Mapping{
			File: jm.File, BuildID: jm.BuildID, Kind: parseKind(jm.Kind),
			HasFunctions: jm.HasFunctions, HasFilenames: jm.HasFilenames,
			HasLineNumbers: jm.HasLineNumbers, HasInlineFrames: jm.HasInlineFrames,
		}
		var err error
		if m.Start, err = parseHex(jm.Start); err == nil {
			if m.Limit, err = parseHex(jm.Limit); err == nil {
				m.Offset, err = parseHex(jm.Offset)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%s: mapping %d: %v", name, i, err)
		}
		maps[i] = m
	}
	frames := func(tid int, which string, in []jsonFrame) ([]*Location, error) {
		var out []*Location
		for i, f := range in {
			addr, err := parseHex(f.Addr)
			if err != nil {
				return nil, fmt.Errorf("%s: thread %d: %s frame %d: %v", name, tid, which, i, err)
			}
			l := &Location{Addr: addr, Kind: parseKind(f.Kind)}
			if f.Mapping >= 0 {
				if f.Mapping >= len(maps) {
					return nil, fmt.Errorf("%s: thread %d: %s frame %d: mapping %d of %d", name, tid, which, i, f.Mapping, len(maps))
				}
				l.Mapping = maps[f.Mapping]
			}
			for _, ln := range f.Lines {
				l.Lines = append(l.Lines, Line(ln))
			}
			if len(l.Lines) == 0 {
				l.Lines = []Line{{Function: "[unknown] " + hex(addr)}}
			}
			out = append(out, l)
		}
		return out, nil
	}
	snap.Threads = make([]Thread, 0, len(d.Threads))
	for _, jt := range d.Threads {
		t := Thread{
			TID: jt.TID, Name: jt.Name, Wchan: jt.Wchan, TracerPID: jt.TracerPID, Tracer: jt.Tracer,
			VoluntarySwitches: jt.VoluntarySwitches, InvoluntarySwitches: jt.InvoluntarySwitches,
			RunTime: time.Duration(jt.RunTime), RunqueueWait: time.Duration(jt.RunqueueWait),
			OffCPUSource: jt.OffCPUSource, Unwinder: jt.Unwinder,
			Stopped: jt.Stopped, Stop: time.Duration(jt.Stop), Err: readErrors(jt.Errs, jt.Err),
		}
		if len(jt.State) > 0 {
			t.State = jt.State[0]
		}
		if jt.OffCPUFor != nil {
			t.OffCPUKnown = true
			t.OffCPUFor = time.Duration(*jt.OffCPUFor)
		}
		if js := jt.Syscall; js != nil {
			sc := &Syscall{Nr: js.Nr, Name: js.Name, Desc: js.Desc}
			for j, a := range js.Args {
				if a == "" {
					continue
				}
				v, err := parseHex(a)
				if err != nil {
					return nil, fmt.Errorf("%s: thread %d: syscall arg %d: %v", name, jt.TID, j, err)
				}
				sc.Args[j] = v
			}
			t.Syscall = sc
		}
		var err error
		if t.Kernel, err = frames(jt.TID, "kernel", jt.Kernel); err != nil {
			return nil, err
		}
		if t.User, err = frames(jt.TID, "user", jt.User); err != nil {
			return nil, err
		}
		for j, a := range jt.UserAddrs {
			v, err := parseHex(a)
			if err != nil {
				return nil, fmt.Errorf("%s: thread %d: user address %d: %v", name, jt.TID, j, err)
			}
			t.UserAddrs = append(t.UserAddrs, v)
		}
		if jw := jt.Wait; jw != nil {
			wt := &Wait{Kind: jw.Kind, Owner: jw.Owner, Desc: jw.Desc, OwnerSite: jw.OwnerSite, On: jw.On}
			if jw.Addr != "" {
				if wt.Addr, err = parseHex(jw.Addr); err != nil {
					return nil, fmt.Errorf("%s: thread %d: wait address: %v", name, jt.TID, err)
				}
			}
			t.Wait = wt
		}
		snap.Threads = append(snap.Threads, t)
	}
	return snap, nil
}

func parseHex(s string) (uint64, error) {
	if len(s) < 3 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') {
		return 0, fmt.Errorf("address %q is not 0x-prefixed hex", truncate(s, 40))
	}
	v, err := strconv.ParseUint(s[2:], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("address %q: not a 64-bit hex number", truncate(s, 40))
	}
	return v, nil
}

func parseKind(s string) FrameKind {
	for k := KindUnknown; k <= KindPython; k++ {
		if k.String() == s {
			return k
		}
	}
	return KindUnknown
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
