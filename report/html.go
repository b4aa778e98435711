package report

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strconv"
	"strings"

	"github.com/stallwatch/stallwatch/model"
)

// WriteHTML writes report.html: the findings first, then a timeline of
// every thread and a flame graph to explore (zoom, search, focus, on-CPU,
// off-CPU or wall time, before or during the stall, a time range), the
// thread table and the thread dump. The page is one file with its script
// and styles inline and the data as JSON: it needs no network and can be
// mailed or attached to a ticket as it is.
func WriteHTML(w io.Writer, c *Capture) error {
	if c == nil {
		return fmt.Errorf("report: WriteHTML: nil capture")
	}
	return writeHTMLView(w, buildView(c))
}

//go:embed assets/report.js
var pageScript string

//go:embed assets/report.css
var pageStyle string

func writeHTMLView(w io.Writer, v *view) error {
	data := htmlData{Title: v.title, Facts: factsAboveFindings(v), Threads: v.threads, Comments: v.comments,
		Notes: v.notes, Style: template.CSS(pageStyle)}
	names := threadNames(v)
	for _, f := range v.findings {
		data.Findings = append(data.Findings, htmlFinding{f, names})
	}
	for i, s := range v.sections {
		data.Sections = append(data.Sections, htmlSection{s: s, ID: fmt.Sprintf("s%d", i)})
	}
	if v.snap != nil {
		data.Dump = dumpHTML(v.snap)
	}
	for _, k := range v.kernel {
		data.Kernel = append(data.Kernel, htmlKernel{Title: k.title, Lines: k.lines, Notes: cleanAll(k.notes)})
	}
	for _, g := range v.waits {
		data.Waits = append(data.Waits, htmlWaitOf(g, names))
	}
	page := buildPageData(v, v.c)
	data.Recovered, data.LastBeat, data.Cut = page.RecoverUS >= 0, page.LastBeat >= 0, len(page.Cuts) > 0
	pd, err := pageJSON(page)
	if err != nil {
		return err
	}
	if err := htmlPage.Execute(w, data); err != nil {
		return err
	}
	return writePageEnd(w, pd)
}

// writePageEnd writes the end of the page after the template: the data
// and the script, as they are. The template would copy the data's
// megabyte into a string and print it through fmt to the same bytes
// (template.JS is written unescaped). Nothing in the data can end its
// element: pageJSON escapes <, > and & in strings as json.Marshal does,
// and its columns are base64.
func writePageEnd(w io.Writer, data []byte) error {
	if _, err := io.WriteString(w, `<script type="application/json" id="sw-data">`); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	_, err := io.WriteString(w, "</script>\n<script>"+pageScript+"</script>\n</body></html>\n")
	return err
}

// factsAboveFindings are the facts the page opens with. The notes — what
// the capture could not do: stacks cut short, symbols missing — are told
// after the findings, in a quieter box (report.txt lists the first few
// among its facts): a note about unwinding in red above them was the
// loudest thing on the page, louder than the deadlock it did not hide.
// One fact says how many notes there are and where.
func factsAboveFindings(v *view) []fact {
	var out []fact
	for _, f := range v.facts {
		if f.key != "note" {
			out = append(out, f)
		}
	}
	if n := len(v.notes); n > 0 {
		out = append(out, fact{key: "notes", value: plural(n, "note", "notes") + " on what this capture could not see, after the findings"})
	}
	return out
}

// threadNames names threads for links: the snapshot's names, else the
// profile's.
func threadNames(v *view) map[int]string {
	m := map[int]string{}
	for _, r := range v.threads {
		m[r.tid] = r.name
	}
	if v.a != nil {
		// The samples' label sets, in the order samples first use them.
		t := v.a.t
		seen := make([]bool, len(t.sets))
		for _, i := range t.set {
			if seen[i] {
				continue
			}
			seen[i] = true
			ls := &t.sets[i]
			tid, err := strconv.Atoi(ls.tidText)
			if err == nil && m[tid] == "" {
				m[tid] = clean(ls.name)
			}
		}
	}
	return m
}

// htmlFinding is a finding with the names of the threads it cites.
type htmlFinding struct {
	model.Finding
	names map[int]string
}

type htmlThreadRef struct {
	TID  int
	Name string
}

func (f htmlFinding) Threads() []htmlThreadRef {
	var out []htmlThreadRef
	for _, tid := range f.TIDs {
		out = append(out, htmlThreadRef{tid, f.names[tid]})
	}
	return out
}

// dumpEntry is one thread of the dump, folded: its facts on the summary
// line, its stack inside.
type dumpEntry struct {
	TID          int
	Line, Stack  string
	Open         bool
	Waits, Error string
}

type dumpData struct {
	Header, Locks string
	Threads       []dumpEntry
}

// dumpHTML lays the thread dump out one thread at a time, in the dump's
// order (waiting threads first); threads in a deadlock, or waiting for
// another thread, are open.
func dumpHTML(snap *model.Snapshot) *dumpData {
	var b bytes.Buffer
	d := &dumpData{}
	writeDumpHeader(&b, snap)
	d.Header = b.String()
	b.Reset()
	writeLockGraph(&b, snap)
	d.Locks = b.String()
	cycle := map[int]bool{}
	for _, cy := range snap.Locks.Cycles {
		for _, tid := range cy {
			cycle[tid] = true
		}
	}
	for _, g := range groupThreads(snap) {
		for _, t := range g.threads {
			var line, stack bytes.Buffer
			writeThreadLine(&line, t)
			writeStack(&stack, t)
			first, rest, _ := strings.Cut(line.String(), "\n")
			d.Threads = append(d.Threads, dumpEntry{
				TID: t.TID, Line: strings.TrimSpace(first), Stack: strings.TrimRight(rest+stack.String(), "\n"),
				Open: threadRank(t, cycle) <= rankWaitsOnThread,
			})
		}
	}
	return d
}

type htmlData struct {
	Title    string
	Facts    []fact
	Findings []htmlFinding
	Threads  []threadRow
	Kernel   []htmlKernel
	Waits    []htmlWait
	Sections []htmlSection
	Dump     *dumpData
	Notes    []string // every note, after the findings
	Comments []string
	// Recovered and LastBeat: the timeline marks them (the legend
	// names only the marks drawn).
	Recovered, LastBeat bool
	Cut                 bool // the flame graph has frames whose callers are unknown
	Style               template.CSS
}

type htmlSection struct {
	s  *section
	ID string
}

// htmlKernel is a kernel context as the page lists it.
type htmlKernel struct {
	Title string
	Lines []fact
	Notes []string
}

// htmlWait is a group of threads waiting on one thing, with their
// off-CPU stacks.
type htmlWait struct {
	Subject, Time string
	Threads       []htmlThreadRef
	Stacks        []htmlStack
}

func htmlWaitOf(g *waitGroup, names map[int]string) htmlWait {
	w := htmlWait{Subject: clean(g.subject), Time: g.timeText()}
	for _, tid := range g.tids {
		w.Threads = append(w.Threads, htmlThreadRef{tid, names[tid]})
	}
	for i, st := range g.stacks {
		w.Stacks = append(w.Stacks, htmlStack{Num: i + 1, Value: valueText(st.value, "nanoseconds"), Threads: st.threadsText(8), Frames: htmlFrames(st.frames)})
	}
	return w
}

func cleanAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = clean(s)
	}
	return out
}

func (h htmlSection) Title() string { return h.s.title }
func (h htmlSection) Total() string { return valueText(h.s.total, h.s.unit) }

type htmlStack struct {
	Num                 int
	Pct, Value, Threads string
	Frames              []htmlFrame
}

// htmlFrame is a frame as the page's stacks list it.
type htmlFrame struct{ f frame }

func (h htmlSection) Stacks() []htmlStack {
	var out []htmlStack
	for i, st := range h.s.stacks {
		out = append(out, htmlStack{
			Num: i + 1, Pct: strings.TrimSpace(pct(st.value, h.s.total)), Value: valueText(st.value, h.s.unit),
			Threads: st.threadsText(8), Frames: htmlFrames(st.frames),
		})
	}
	return out
}

func htmlFrames(fr []frame) []htmlFrame {
	out := make([]htmlFrame, len(fr))
	for i, f := range fr {
		out[i] = htmlFrame{f}
	}
	return out
}

func (h htmlSection) More() int { return h.s.count - len(h.s.stacks) }

type htmlFunc struct{ Name, Flat, FlatPct, Cum, CumPct string }

func (h htmlSection) Funcs() []htmlFunc {
	var out []htmlFunc
	for i, f := range h.s.funcs {
		if i == detailFuncs {
			break
		}
		out = append(out, htmlFunc{f.name, valueText(f.flat, h.s.unit), strings.TrimSpace(pct(f.flat, h.s.total)),
			valueText(f.cum, h.s.unit), strings.TrimSpace(pct(f.cum, h.s.total))})
	}
	return out
}

// Exported for the template.
func (f fact) Key() string       { return f.key }
func (f fact) Value() string     { return f.value }
func (f fact) Warn() bool        { return f.warn }
func (r threadRow) TID() int     { return r.tid }
func (r threadRow) Name() string { return r.name }
func (r threadRow) State() string {
	return r.state
}
func (r threadRow) OffCPU() string { return r.offCPU }
func (r threadRow) Runq() string   { return r.runq }
func (r threadRow) CPU() string    { return r.cpu }
func (r threadRow) Top() string    { return r.top }
func (r threadRow) Waits() string  { return r.waits }
func (r threadRow) Err() string    { return r.unreadableErr }
func (h htmlFrame) Text() string   { return h.f.String() }
func (h htmlFrame) Module() string { return h.f.Module }
func (h htmlFrame) Class() string {
	switch h.f.Kind {
	case model.KindKernel:
		return "k"
	case model.KindJIT:
		return "j"
	case model.KindUnknown:
		return "u"
	}
	return "n"
}

var htmlPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>{{.Style}}</style></head><body>
<h1>{{.Title}}</h1>
<table class="facts">{{range .Facts}}<tr{{if .Warn}} class="warn"{{end}}><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}</table>
{{if .Findings}}<h2 id="findings">Findings <small>(the most likely cause first)</small></h2><ol class="findings">{{range .Findings}}
<li class="finding {{.Severity}}" data-kind="{{.Kind}}"><span class="sev">{{.Severity}}</span><span class="sum">{{.Summary}}</span>
{{if .Detail}}<div class="det">{{.Detail}}</div>{{end}}
{{if or .TIDs .Functions}}<div class="refs">{{if .TIDs}}threads: {{range .Threads}}<a href="#timeline" class="focus-thread" data-tid="{{.TID}}" title="show this thread in the timeline and the flame graph">{{.TID}}{{if .Name}} "{{.Name}}"{{end}}</a><a href="#thread-{{.TID}}" data-tid="{{.TID}}" title="its stack in the thread dump">[stack]</a> {{end}}{{end}}{{if .Functions}} functions: {{range .Functions}}<a href="#flame" data-fn="{{.}}" title="find it in the flame graph">{{.}}</a>{{end}}{{end}}</div>{{end}}
</li>{{end}}</ol>{{end}}
{{if .Notes}}<details class="notes" id="notes"><summary>Notes ({{len .Notes}}): what this capture could not see</summary><ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul></details>{{end}}
{{range $i, $k := .Kernel}}<details class="kernel" id="kernel-{{$i}}"{{if eq $i 0}} open{{end}}><summary>{{$k.Title}}</summary><table class="facts">{{range $k.Lines}}<tr{{if .Warn}} class="warn"{{end}}><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}</table>{{if $k.Notes}}<ul>{{range $k.Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}</details>
{{end}}
<div id="sw-tl"><h2 id="timeline">Timeline <small>(one row per thread; drag to select a time range)</small></h2>
<div class="panel"><div class="legend"><span style="background:#2f9e44;color:#fff">on CPU</span><span style="background:#f08c00">runnable, waiting for a CPU</span><span style="background:#74a9cf">blocked</span><span style="background:repeating-linear-gradient(135deg,#b7d3e9 0 3px,#74a9cf 3px 4px)">off the CPU since (thread snapshot)</span><span style="color:#e03131">| trigger</span>{{if .LastBeat}}<span style="color:#868e96">| last beat</span>{{end}}{{if .Recovered}}<span style="color:#2b8a3e">| recovered</span>{{end}}</div>
<div class="tl"><div id="sw-tl-labels"></div><canvas id="sw-timeline"></canvas></div><div id="sw-tl-axis"></div></div></div>
<h2 id="flame">Flame graph <small>(click a frame to zoom; hover for values)</small></h2>
<div class="panel"><div class="bar"><span class="seg" id="sw-mode"></span><span class="seg" id="sw-phase"></span><span class="seg" id="sw-orient"></span>
<input id="sw-search" type="search" placeholder="search functions (regexp)" aria-label="search functions"><button id="sw-reset" type="button" disabled>reset zoom</button><span id="sw-chips"></span></div>
<div class="bar"><span id="sw-total"></span><span id="sw-matched"></span></div>
<div id="sw-crumbs"></div>
<div class="legend"><span style="background:hsl(20,75%,66%)">native</span><span style="background:hsl(30,85%,60%)">kernel</span><span style="background:hsl(110,50%,58%)">JIT</span><span style="background:hsl(0,0%,74%)">unknown</span><span style="background:#b197fc">search match</span>{{if .Cut}}<span class="cutkey">callers unknown (the stack was cut short: hover for why)</span>{{end}}</div>
<div id="sw-flame"></div>
<noscript><p>The flame graph and the timeline need JavaScript; the top stacks below do not.</p></noscript></div>
{{if .Threads}}<h2 id="threads">Threads ({{len .Threads}}; waiting first)</h2>
<div class="scroll"><table class="threads"><tr><th>tid</th><th>name</th><th>state</th><th class="opt">off-CPU for</th><th class="opt">run-queue wait</th><th>CPU in capture</th><th>top frame</th><th>waits for</th></tr>
{{range .Threads}}<tr><td class="num"><a href="#thread-{{.TID}}" data-tid="{{.TID}}">{{.TID}}</a></td><td class="mono">{{.Name}}</td><td>{{.State}}</td><td class="num opt">{{.OffCPU}}</td><td class="num opt">{{.Runq}}</td><td class="num">{{.CPU}}</td><td class="mono">{{.Top}}{{if .Err}} <em>({{.Err}})</em>{{end}}</td><td>{{.Waits}}</td></tr>
{{end}}</table></div>{{end}}
{{with .Dump}}<h2 id="dump">Thread dump <small>(one thread at a time; open one to see its stack)</small></h2><div class="dump"><pre>{{.Header}}</pre><pre>{{.Locks}}</pre>
{{range .Threads}}<details class="thread" id="thread-{{.TID}}"{{if .Open}} open{{end}}><summary>{{.Line}}</summary><pre>{{.Stack}}</pre></details>
{{end}}</div>{{end}}
{{if .Waits}}<h2 id="waiting">Waiting on <small>(the snapshot's waiting threads by what they wait on: sockets by peer, files by path, locks by owner; their off-CPU time and stacks)</small></h2>{{range .Waits}}
<details><summary><b>{{.Time}}</b> {{.Subject}} — {{range .Threads}}<a href="#timeline" class="focus-thread" data-tid="{{.TID}}" title="show this thread in the timeline and the flame graph">{{.TID}}{{if .Name}} "{{.Name}}"{{end}}</a> {{end}}</summary>
{{range $s := .Stacks}}<div><b>#{{$s.Num}}</b> {{$s.Value}} <span class="mod">{{$s.Threads}}</span>
<ol class="stack">{{range $s.Frames}}<li class="mono {{.Class}}">{{.Text}}<span class="mod">{{.Module}}</span></li>{{end}}</ol></div>{{end}}
</details>{{end}}{{end}}
{{if .Sections}}<h2 id="stacks">Top stacks and functions</h2>{{range .Sections}}
<details><summary>{{.Title}} — total {{.Total}}</summary>
{{range $s := .Stacks}}<div><b>#{{$s.Num}} {{$s.Pct}}</b> {{$s.Value}} <span class="mod">{{$s.Threads}}</span>
<ol class="stack">{{range $s.Frames}}<li class="mono {{.Class}}">{{.Text}}<span class="mod">{{.Module}}</span></li>{{end}}</ol></div>{{end}}
{{if .More}}<p>… {{.More}} more stacks: <code>go tool pprof -traces</code> shows them all.</p>{{end}}
<table><tr><th class="num">flat</th><th class="num">flat%</th><th class="num">cum</th><th class="num">cum%</th><th>function</th></tr>
{{range .Funcs}}<tr><td class="num">{{.Flat}}</td><td class="num">{{.FlatPct}}</td><td class="num">{{.Cum}}</td><td class="num">{{.CumPct}}</td><td class="mono">{{.Name}}</td></tr>{{end}}
</table></details>{{end}}{{end}}
{{if .Comments}}<h2>Profile comments</h2><ul>{{range .Comments}}<li class="mono">{{.}}</li>{{end}}</ul>{{end}}
<p class="mod">Written by stallwatch. The same data: <code>go tool pprof -http=: profile.pb.gz</code>, <code>stallwatch report DIR --format folded</code>, <code>--format speedscope</code>.</p>
<div id="sw-tip" role="tooltip"></div>
`)) // writePageEnd writes the data, the script and the end
