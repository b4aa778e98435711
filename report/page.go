package report

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/stallwatch/stallwatch/model"
)

// pageData is what report.html's script draws from, embedded in the page
// as JSON. It is kept small: names are in one string table, frames are
// indexes into it, stacks are nodes of one call tree (each node its
// parent and its frame), and samples are columns of small integers (end
// times as differences from the previous sample's).
type pageData struct {
	Title    string          `json:"title"`
	Findings []model.Finding `json:"findings"`
	// Modes are the values the flame graph can show: "cpu", "off",
	// "wall" for stallwatch's profiles, else one "value" mode.
	Modes []pageMode `json:"modes"`
	// Phases present: "during", "before", or "" (no phases).
	Phases []string `json:"phases"`

	Strings []string `json:"strings"`
	// Frames: name (string index), kind (pageKind: 0 native, 1 kernel,
	// 2 JIT, 3 unknown), module (string index), as triples.
	Frames column `json:"frames"`
	// Nodes of the call tree as (node minus its parent, frame) pairs;
	// node 0 is the root (0, -1). Nodes are numbered depth first with
	// callees in alphabetical order, so a parent comes before its
	// children and the children of a node come in the order a flame
	// graph draws them.
	Nodes column `json:"nodes"`
	// Cuts are (frame, string) pairs: the frame is the outermost one
	// known of stacks cut short, the string why ("[truncated: …]"). The
	// marker itself is not a frame of the tree: the graph opens on the
	// functions a stack reached, never on a row of markers, and the frame
	// says its callers are unknown.
	Cuts column `json:"cuts"`
	// Period is the weight of an on-CPU sample written as 0 (µs): most
	// are one sampling period.
	Period int64 `json:"period"`

	Threads []pageThread `json:"threads"`
	Samples pageSamples  `json:"samples"`

	// Times in microseconds from Start (Unix ms): the window's end, the
	// trigger and the recovery (-1: none in the window), the last beat.
	StartMS   int64 `json:"startMs"`
	EndUS     int64 `json:"endUs"`
	TriggerUS int64 `json:"triggerUs"`
	RecoverUS int64 `json:"recoverUs"`
	LastBeat  int64 `json:"lastBeatUs"`
	Timed     bool  `json:"timed"` // samples carry end_timestamp_ns
}

type pageMode struct {
	ID    string `json:"id"`
	Label string `json:"label"`
	Unit  string `json:"unit"` // "us" or "count"
}

type pageThread struct {
	TID    int    `json:"tid"`
	Name   string `json:"name"`
	State  string `json:"state,omitempty"`
	Waits  string `json:"waits,omitempty"`
	Top    string `json:"top,omitempty"`
	InDump bool   `json:"dump"`
	// OffSinceUS is when the snapshot found the thread had left the CPU
	// (µs from the window's start; -1: running or unknown), SnapUS when
	// the snapshot read it: the thread was off the CPU all that time,
	// whatever the samples say (the flight recorder does not record
	// off-CPU intervals). Stack is its snapshot stack, innermost first,
	// as string indexes.
	OffSinceUS int64 `json:"offSinceUs"` // may be before the window (< 0)
	OffKnown   bool  `json:"offKnown"`
	SnapUS     int64 `json:"snapUs"`
	Stack      []int `json:"stack,omitempty"`
}

// pageSamples are column arrays, one entry per pprof sample, ordered by
// end time.
type pageSamples struct {
	Thread column `json:"t"` // index into Threads
	Node   column `json:"n"` // leaf node of its stack
	End    column `json:"e"` // µs end time, minus the previous sample's
	Weight column `json:"w"` // µs (or the value, for "count" modes); 0: Period
	// Class: kind*3+phase; kind 0 on-CPU, 1 blocked, 2 preempted;
	// phase 0 during, 1 before, 2 none.
	Class column `json:"c"`
}

// column is a list of integers as the page carries it: each a zigzag
// varint (as protobuf writes sint64), all of them in base64. A 100,000
// sample capture takes about a third of the bytes of a JSON array, and
// the HTML parser, which reads every byte of the page, less time.
type column []int64

// MarshalText makes a column a JSON string without the validation
// encoding/json gives a Marshaler's output (a scan of every byte: most of
// the page's encoding).
func (c column) MarshalText() ([]byte, error) {
	buf := c.appendVarints(make([]byte, 0, len(c)*2))
	return base64.StdEncoding.AppendEncode(make([]byte, 0, base64.StdEncoding.EncodedLen(len(buf))), buf), nil
}

// appendVarints appends the column's zigzag varints, before base64.
// Most of a page's values (threads, classes, nodes, period weights, the
// time from one sample to the next) take one byte.
func (c column) appendVarints(dst []byte) []byte {
	for _, v := range c {
		u := uint64(v<<1) ^ uint64(v>>63)
		if u < 0x80 {
			dst = append(dst, byte(u))
			continue
		}
		dst = binary.AppendUvarint(dst, u)
	}
	return dst
}

func (c *column) UnmarshalText(b []byte) error {
	raw, err := base64.StdEncoding.AppendDecode(nil, b)
	if err != nil {
		return err
	}
	*c = (*c)[:0]
	for len(raw) > 0 {
		u, n := binary.Uvarint(raw)
		if n <= 0 {
			return fmt.Errorf("bad varint in column")
		}
		raw = raw[n:]
		*c = append(*c, int64(u>>1)^-int64(u&1))
	}
	return nil
}

// cutMarker takes the truncation marker off the outer end of a stack
// (innermost first) and says it; a stack that is the marker alone keeps
// it, having nothing else to show.
func cutMarker(fr []frame) ([]frame, string) {
	if n := len(fr); n > 1 && isCutMarker(fr[n-1]) {
		return fr[:n-1], fr[n-1].Name
	}
	return fr, ""
}

// isCutMarker reports whether f is symbolize.CutLocation's pseudo-frame.
func isCutMarker(f frame) bool {
	return f.Kind == model.KindUnknown && f.Module == "" && strings.HasPrefix(f.Name, "[truncated: ")
}

// Sample classes, as the script reads them.
const (
	classOnCPU = iota
	classBlocked
	classPreempted
)

func buildPageData(v *view, c *Capture) *pageData {
	d := &pageData{Title: v.title, Findings: v.findings, RecoverUS: -1, TriggerUS: -1, LastBeat: -1}
	if d.Findings == nil {
		d.Findings = []model.Finding{}
	}
	st := newStringTable()
	threadIdx := map[string]int{}
	for _, r := range v.threads {
		threadIdx[strconv.Itoa(r.tid)] = len(d.Threads)
		d.Threads = append(d.Threads, pageThread{TID: r.tid, Name: r.name, State: r.state, Waits: r.waits, Top: r.top, InDump: true, OffSinceUS: -1, SnapUS: -1})
	}
	if v.a == nil || v.a.t.len() == 0 {
		d.Strings = st.list
		d.Modes = []pageMode{}
		d.Phases = []string{}
		d.Frames, d.Nodes, d.Cuts = column{}, column{0, -1}, column{}
		base := d.fillTimes(c, 0, 0)
		d.snapshotSpans(v, base, st)
		return d
	}
	a := v.a
	t, p := a.t, a.p
	cpuI, offI, valI := -1, -1, -1
	if hasType(p, model.TypeCPUTime) {
		cpuI, _ = valueIndex(p, model.TypeCPUTime)
		d.Modes = append(d.Modes, pageMode{"cpu", "on-CPU", "us"})
	}
	if hasType(p, model.TypeOffCPUTime) {
		offI, _ = valueIndex(p, model.TypeOffCPUTime)
		d.Modes = append(d.Modes, pageMode{"off", "off-CPU", "us"})
	}
	if cpuI >= 0 && offI >= 0 {
		d.Modes = append(d.Modes, pageMode{"wall", "wall (on + off)", "us"})
	}
	if len(d.Modes) == 0 {
		valI, _ = valueIndex(p, "")
		unit := "count"
		if p.SampleType[valI].Unit == "nanoseconds" {
			unit = "us"
		}
		d.Modes = []pageMode{{"value", clean(p.SampleType[valI].Type), unit}}
	}
	d.Phases = a.phases()

	// Frames and the call tree, from the analysis's distinct stacks.
	type frameKey struct {
		frame
		cut string // the outermost frame of a stack cut short: why
	}
	frameIdx := map[frameKey]int{}
	var frameNames []string
	type edge struct{ parent, frame int }
	nodeIdx := map[edge]int{}
	parent, nframe := []int{-1}, []int{-1}
	leaf := make([]int, len(a.stacks))
	d.Cuts = column{}
	for id, fr := range a.stacks {
		fr, cut := cutMarker(fr)
		n := 0
		for i := len(fr) - 1; i >= 0; i-- {
			f := fr[i]
			key := frameKey{frame: frame{Name: f.Name, Module: f.Module, Kind: f.Kind}}
			if i == len(fr)-1 {
				key.cut = cut
			}
			fi, ok := frameIdx[key]
			if !ok {
				fi = len(d.Frames) / 3
				frameIdx[key] = fi
				d.Frames = append(d.Frames, int64(st.id(f.Name)), pageKind(f.Kind), int64(st.id(f.Module)))
				frameNames = append(frameNames, f.Name)
				if key.cut != "" {
					d.Cuts = append(d.Cuts, int64(fi), int64(st.id(key.cut)))
				}
			}
			e := edge{n, fi}
			c, ok := nodeIdx[e]
			if !ok {
				c = len(parent)
				nodeIdx[e] = c
				parent = append(parent, n)
				nframe = append(nframe, fi)
			}
			n = c
		}
		leaf[id] = n
	}
	renum := d.layOutNodes(parent, nframe, frameNames)
	for id := range leaf {
		leaf[id] = renum[leaf[id]]
	}

	// Samples, ordered by end time: the columns are written in one pass,
	// End first as each sample's end (µs since the epoch, 0: none) and
	// Weight as its weight, made relative once the window's start and
	// the period are known.
	n := t.len()
	sm := &d.Samples
	sm.Thread, sm.Node, sm.End = make(column, 0, n), make(column, 0, n), make(column, 0, n)
	sm.Weight, sm.Class = make(column, 0, n), make(column, 0, n)
	var minStart, maxEnd int64
	timed := false
	// What the samples of each label set share, found once: their
	// thread, phase and kind of off-CPU time.
	type setFacts struct {
		thread int // -1: not found yet
		phase  int64
		offCPU int64
	}
	sets := make([]setFacts, len(t.sets))
	for i := range sets {
		sets[i].thread = -1
	}
	// In end time order: the timeline's, so that the samples need no sort.
	for _, k := range t.endOrder() {
		i := int(k)
		sf := &sets[t.set[i]]
		if sf.thread < 0 {
			lb := &t.sets[t.set[i]]
			sf.thread = d.threadOf(lb, threadIdx)
			sf.phase, sf.offCPU = int64(phaseClass(lb.phase)), classBlocked
			if lb.offCPU == "preempted" {
				sf.offCPU = classPreempted
			}
		}
		var weight, class int64
		switch {
		case valI >= 0:
			weight = t.value(i, valI)
			if d.Modes[0].Unit == "us" {
				weight = (weight + 500) / 1000
			}
		case offI >= 0 && t.value(i, offI) > 0:
			weight = (t.value(i, offI) + 500) / 1000
			class = sf.offCPU
		case cpuI >= 0:
			weight = (t.value(i, cpuI) + 500) / 1000
		}
		if weight == 0 {
			continue
		}
		var end int64
		if e := t.end[i]; e > 0 {
			timed = true
			end = e / 1000
			start := end - weight
			if minStart == 0 || start < minStart {
				minStart = start
			}
			maxEnd = max(maxEnd, end)
		}
		sm.Thread = append(sm.Thread, int64(sf.thread))
		sm.Node = append(sm.Node, int64(leaf[a.stackOf(i)]))
		sm.End = append(sm.End, end)
		sm.Weight = append(sm.Weight, weight)
		sm.Class = append(sm.Class, class*3+sf.phase)
	}
	// The most common on-CPU weight (one sampling period) is written as 0.
	d.Period = commonPeriod(sm.Weight, sm.Class)
	d.Timed = timed
	base := d.fillTimes(c, minStart, maxEnd)
	d.snapshotSpans(v, base, st)
	prev := int64(0)
	for k, end := range sm.End {
		if timed {
			end -= base
		} else {
			end = 0
		}
		sm.End[k] = end - prev
		prev = end
		if valI < 0 && sm.Weight[k] == d.Period && sm.Class[k]/3 == classOnCPU {
			sm.Weight[k] = 0
		}
	}
	d.Strings = st.list
	return d
}

// threadOf is the index in d.Threads of a label set's thread, added
// when the snapshot did not list it.
func (d *pageData) threadOf(lb *labelSet, threadIdx map[string]int) int {
	tid := strconv.Itoa(lb.tid)
	if lb.tid == 0 {
		tid = lb.tidText // not a number: as it is
	}
	ti, ok := threadIdx[tid]
	if !ok {
		ti = len(d.Threads)
		threadIdx[tid] = ti
		d.Threads = append(d.Threads, pageThread{TID: lb.tid, Name: clean(lb.name), OffSinceUS: -1, SnapUS: -1})
	}
	return ti
}

// commonPeriod is the most common weight of the on-CPU samples (the
// smallest of those as common), 0 with none. The samples of a capture
// mostly weigh one sampling period each, so the weights are counted a
// run of equal ones at a time: a map write per run, not per sample.
func commonPeriod(weight, class column) int64 {
	counts := map[int64]int{}
	run, runW := 0, int64(0)
	for k, w := range weight {
		if class[k]/3 != classOnCPU {
			continue
		}
		if run > 0 && w != runW {
			counts[runW] += run
			run = 0
		}
		run, runW = run+1, w
	}
	if run > 0 {
		counts[runW] += run
	}
	var period int64
	for w, n := range counts {
		if n > counts[period] || (n == counts[period] && w < period) {
			period = w
		}
	}
	return period
}

// snapshotSpans adds what the snapshot knows of each thread: since when it
// had been off the CPU, and its stack.
func (d *pageData) snapshotSpans(v *view, baseUS int64, st *stringTable) {
	snap := v.snap
	if snap == nil || baseUS == 0 || snap.Time.IsZero() {
		return
	}
	at := snap.Time.UnixMicro() - baseUS
	ix := indexThreads(snap)
	for i := range d.Threads {
		pt := &d.Threads[i]
		t := ix[pt.TID]
		if t == nil {
			continue
		}
		pt.SnapUS = at
		if t.OffCPUKnown && t.State != 'R' && t.OffCPUFor > 0 {
			pt.OffSinceUS, pt.OffKnown = at-t.OffCPUFor.Microseconds(), true
		}
		for _, part := range [][]*model.Location{t.Kernel, t.User} {
			for _, l := range part {
				if l == nil {
					continue
				}
				for _, ln := range l.Lines {
					name := frameText(ln)
					if l.Kind == model.KindKernel {
						name = "[k] " + name
					}
					pt.Stack = append(pt.Stack, st.id(name))
				}
			}
		}
	}
}

// layOutNodes numbers the call tree depth first, callees in alphabetical
// order, writes it to d.Nodes and returns each old node's new number.
func (d *pageData) layOutNodes(parent, nframe []int, names []string) []int {
	kids := make([][]int, len(parent))
	for n := 1; n < len(parent); n++ {
		kids[parent[n]] = append(kids[parent[n]], n)
	}
	renum := make([]int, len(parent))
	d.Nodes = make(column, 0, 2*len(parent))
	next := 0
	var visit func(n, newParent int)
	visit = func(n, newParent int) {
		id := next
		next++
		renum[n] = id
		if n == 0 {
			d.Nodes = append(d.Nodes, 0, -1)
		} else {
			d.Nodes = append(d.Nodes, int64(id-newParent), int64(nframe[n]))
		}
		ks := kids[n]
		sort.Slice(ks, func(i, j int) bool {
			a, b := names[nframe[ks[i]]], names[nframe[ks[j]]]
			if a != b {
				return a < b
			}
			return ks[i] < ks[j]
		})
		for _, k := range ks {
			visit(k, id)
		}
	}
	visit(0, 0)
	return renum
}

func phaseClass(ph string) int {
	switch ph {
	case model.PhaseDuring:
		return 0
	case model.PhaseBefore:
		return 1
	}
	return 2
}

// fillTimes sets the window's times relative to its start and returns the
// start in µs since the epoch: the capture's start, or the first sample's.
func (d *pageData) fillTimes(c *Capture, minStart, maxEnd int64) int64 {
	in := &c.Info
	startUS := minStart
	if !in.Start.IsZero() && (startUS == 0 || in.Start.UnixMicro() < startUS) {
		startUS = in.Start.UnixMicro()
	}
	// A capture without a flight recorder starts sampling just after its
	// trigger: the window shown begins at the trigger then.
	if !in.TriggerAt.IsZero() && startUS != 0 && in.TriggerAt.UnixMicro() < startUS {
		startUS = in.TriggerAt.UnixMicro()
	}
	endUS := maxEnd
	if !in.End.IsZero() && in.End.UnixMicro() > endUS {
		endUS = in.End.UnixMicro()
	}
	if startUS == 0 {
		return 0
	}
	d.StartMS = startUS / 1000
	startUS = d.StartMS * 1000
	d.EndUS = max(endUS-startUS, 0)
	rel := func(us int64) int64 {
		if us < startUS || us > startUS+d.EndUS {
			return -1
		}
		return us - startUS
	}
	if !in.TriggerAt.IsZero() {
		d.TriggerUS = rel(in.TriggerAt.UnixMicro())
	}
	if !in.Recovered.IsZero() {
		d.RecoverUS = rel(in.Recovered.UnixMicro())
	}
	if !in.LastBeat.IsZero() {
		d.LastBeat = rel(in.LastBeat.UnixMicro())
	}
	return startUS
}

// stringTable interns the page's strings.
type stringTable struct {
	list []string
	idx  map[string]int
}

func newStringTable() *stringTable {
	return &stringTable{list: []string{""}, idx: map[string]int{"": 0}}
}

func (t *stringTable) id(s string) int {
	if i, ok := t.idx[s]; ok {
		return i
	}
	i := len(t.list)
	t.list = append(t.list, s)
	t.idx[s] = i
	return i
}

// pageJSON encodes the page's data for a <script type="application/json">
// element, as json.Marshal encodes it, byte for byte: json.Marshal
// escapes <, > and &, so no string of the target's can close the
// element. The columns — nearly all of the bytes — are appended as they
// are encoded (pageWriter.column); encoding/json would copy each and scan
// every byte of it for characters to escape, of which base64 has none.
// The rest, a few thousand values, is json.Marshal's.
func pageJSON(d *pageData) ([]byte, error) {
	sm := &d.Samples
	n, longest := 0, 0
	for _, c := range []column{d.Frames, d.Nodes, d.Cuts, sm.Thread, sm.Node, sm.End, sm.Weight, sm.Class} {
		n, longest = n+len(c), max(longest, len(c))
	}
	w := &pageWriter{b: make([]byte, 0, 4*n+64<<10), raw: make([]byte, 0, 2*longest)}
	w.b = append(w.b, '{')
	w.value("title", d.Title)
	w.value("findings", d.Findings)
	w.value("modes", d.Modes)
	w.value("phases", d.Phases)
	w.value("strings", d.Strings)
	w.column("frames", d.Frames)
	w.column("nodes", d.Nodes)
	w.column("cuts", d.Cuts)
	w.value("period", d.Period)
	w.value("threads", d.Threads)
	w.key("samples")
	w.b = append(w.b, '{')
	w.column("t", sm.Thread)
	w.column("n", sm.Node)
	w.column("e", sm.End)
	w.column("w", sm.Weight)
	w.column("c", sm.Class)
	w.b[len(w.b)-1] = '}'
	w.b = append(w.b, ',')
	w.value("startMs", d.StartMS)
	w.value("endUs", d.EndUS)
	w.value("triggerUs", d.TriggerUS)
	w.value("recoverUs", d.RecoverUS)
	w.value("lastBeatUs", d.LastBeat)
	w.value("timed", d.Timed)
	if w.err != nil {
		return nil, w.err
	}
	w.b[len(w.b)-1] = '}'
	return w.b, nil
}

// pageWriter appends the fields of a JSON object, each followed by a
// comma (the last one's is replaced by the closing brace). The keys are
// pageData's JSON names, none of which needs escaping.
type pageWriter struct {
	b   []byte
	raw []byte // a column's varints, before base64
	err error
}

func (w *pageWriter) key(k string) {
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

// value appends a field as json.Marshal encodes it.
func (w *pageWriter) value(k string, v any) {
	w.key(k)
	j, err := json.Marshal(v)
	if err != nil && w.err == nil {
		w.err = err
	}
	w.b = append(w.b, j...)
	w.b = append(w.b, ',')
}

// column appends a column as MarshalText makes it, a JSON string.
func (w *pageWriter) column(k string, c column) {
	w.key(k)
	w.raw = c.appendVarints(w.raw[:0])
	w.b = append(w.b, '"')
	w.b = base64.StdEncoding.AppendEncode(w.b, w.raw)
	w.b = append(w.b, '"', ',')
}

// pageKind is a frame's kind as the viewer numbers it: 0 native, 1
// kernel, 2 JIT, 3 unknown.
func pageKind(k model.FrameKind) int64 {
	switch k {
	case model.KindNative:
		return 0
	case model.KindKernel:
		return 1
	case model.KindJIT:
		return 2
	}
	return 3
}
