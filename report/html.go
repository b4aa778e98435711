package report

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"strings"

	"github.com/stallwatch/stallwatch/capdir"
)

// WriteHTML writes report.html: what report.txt says, laid out for a
// browser, with an icicle graph of each on-CPU and off-CPU section. The
// page is self-contained (inline CSS and SVG, no script, no network), so
// it can be mailed or attached to a ticket as it is.
func WriteHTML(w io.Writer, c *Capture) error {
	if c == nil {
		return fmt.Errorf("report: WriteHTML: nil capture")
	}
	return writeHTMLView(w, buildView(c))
}

func writeHTMLView(w io.Writer, v *view) error {
	data := htmlData{Title: v.title, Facts: v.facts, Findings: v.findings, Threads: v.threads, Comments: v.comments}
	if len(v.notes) > screenNotes+1 {
		data.Notes = v.notes
	}
	for i, s := range v.sections {
		hs := htmlSection{s: s, ID: fmt.Sprintf("s%d", i), Open: i < 2 || s.phase != PhaseBefore}
		hs.Flame = flameSVG(s.flame, s.unit, hs.ID+"-flame")
		data.Sections = append(data.Sections, hs)
	}
	if v.snap != nil {
		var buf bytes.Buffer
		if err := WriteThreadDump(&buf, v.snap); err != nil {
			return err
		}
		data.Dump = buf.String()
	}
	return htmlPage.Execute(w, data)
}

type htmlData struct {
	Title    string
	Facts    []fact
	Findings []capdir.Finding
	Threads  []threadRow
	Sections []htmlSection
	Dump     string
	Notes    []string // all notes, when the facts show only the first
	Comments []string
}

type htmlSection struct {
	s     *section
	ID    string
	Open  bool
	Flame template.HTML
}

func (h htmlSection) Title() string { return h.s.title }
func (h htmlSection) Total() string { return valueText(h.s.total, h.s.unit) }

type htmlStack struct {
	Num                 int
	Pct, Value, Threads string
	Frames              []frame
}

func (h htmlSection) Stacks() []htmlStack {
	var out []htmlStack
	for i, st := range h.s.stacks {
		out = append(out, htmlStack{
			Num: i + 1, Pct: strings.TrimSpace(pct(st.value, h.s.total)), Value: valueText(st.value, h.s.unit),
			Threads: st.threadsText(8), Frames: st.frames,
		})
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
func (f frame) Text() string       { return f.String() }
func (f frame) Module() string     { return f.module }
func (f frame) Class() string {
	switch f.kind {
	case kindKernel:
		return "k"
	case kindJIT:
		return "j"
	case kindUnknown:
		return "u"
	}
	return "n"
}

var htmlPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:1280px;padding:0 1em;color:#1d1d22;background:#fff}
h1{font-size:1.35em;margin:.2em 0 .6em}
h2{font-size:1.1em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.3em 0}
td,th{padding:2px 8px;text-align:left;vertical-align:top}
th{background:#f1f1f4;font-weight:600}
tr:nth-child(even) td{background:#fafafc}
.facts td:first-child{font-weight:600;white-space:nowrap;color:#555}
.warn td{color:#a10000;font-weight:600}
.findings li{margin:.2em 0}
.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
pre{background:#f7f7f9;border:1px solid #e3e3e8;padding:.8em;overflow-x:auto}
details{margin:.4em 0}
summary{cursor:pointer;font-weight:600}
.stack{margin:.3em 0 .8em 1em}
.stack li{list-style:none;white-space:nowrap}
.stack .k{color:#b45309}.stack .j{color:#15803d}.stack .u{color:#777}
.mod{color:#888;margin-left:1em}
svg.flame{display:block;margin:.5em 0;background:#fcfcfd;border:1px solid #eee}
svg.flame text{font:11px ui-monospace,Menlo,Consolas,monospace;fill:#111;pointer-events:none}
svg.flame g:hover rect{stroke:#000;stroke-width:.6}
.legend span{display:inline-block;padding:0 .5em;margin-right:.5em;border-radius:2px}
</style></head><body>
<h1>{{.Title}}</h1>
<table class="facts">{{range .Facts}}<tr{{if .Warn}} class="warn"{{end}}><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}</table>
{{if .Findings}}<h2>Findings</h2><ul class="findings">{{range .Findings}}<li>{{.Summary}}</li>{{end}}</ul>{{end}}
{{if .Threads}}<h2>Threads ({{len .Threads}}; waiting first)</h2>
<table class="threads"><tr><th>tid</th><th>name</th><th>state</th><th>off-CPU for</th><th>run-queue wait</th><th>CPU in capture</th><th>top frame</th><th>waits for</th></tr>
{{range .Threads}}<tr><td class="num">{{.TID}}</td><td class="mono">{{.Name}}</td><td>{{.State}}</td><td class="num">{{.OffCPU}}</td><td class="num">{{.Runq}}</td><td class="num">{{.CPU}}</td><td class="mono">{{.Top}}{{if .Err}} <em>({{.Err}})</em>{{end}}</td><td>{{.Waits}}</td></tr>
{{end}}</table>{{end}}
{{range .Sections}}<h2 id="{{.ID}}">{{.Title}} — total {{.Total}}</h2>
<details{{if .Open}} open{{end}}><summary>Icicle graph (callers above callees; hover for values)</summary>
<div class="legend"><span style="background:hsl(10,75%,65%)">native</span><span style="background:hsl(33,85%,60%)">kernel</span><span style="background:hsl(115,55%,60%)">JIT</span><span style="background:hsl(0,0%,72%)">unknown</span></div>
{{if .Flame}}{{.Flame}}{{else}}<p>(no samples)</p>{{end}}</details>
<details{{if .Open}} open{{end}}><summary>Top stacks</summary>
{{range $s := .Stacks}}<div><b>#{{$s.Num}} {{$s.Pct}}</b> {{$s.Value}} <span class="mod">{{$s.Threads}}</span>
<ol class="stack">{{range $s.Frames}}<li class="mono {{.Class}}">{{.Text}}<span class="mod">{{.Module}}</span></li>{{end}}</ol></div>{{end}}
{{if .More}}<p>… {{.More}} more stacks: <code>go tool pprof -traces</code> shows them all.</p>{{end}}
</details>
<details><summary>Top functions</summary>
<table><tr><th class="num">flat</th><th class="num">flat%</th><th class="num">cum</th><th class="num">cum%</th><th>function</th></tr>
{{range .Funcs}}<tr><td class="num">{{.Flat}}</td><td class="num">{{.FlatPct}}</td><td class="num">{{.Cum}}</td><td class="num">{{.CumPct}}</td><td class="mono">{{.Name}}</td></tr>{{end}}
</table></details>
{{end}}
{{if .Dump}}<h2>Thread dump</h2><pre>{{.Dump}}</pre>{{end}}
{{if .Notes}}<h2>Notes</h2><ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .Comments}}<h2>Profile comments</h2><ul>{{range .Comments}}<li class="mono">{{.}}</li>{{end}}</ul>{{end}}
<p class="mod">Written by stallwatch. The same data: <code>go tool pprof -http=: profile.pb.gz</code>, <code>stallwatch report DIR --format folded</code>.</p>
</body></html>
`))
