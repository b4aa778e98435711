package report

import (
	"fmt"
	"hash/fnv"
	"html/template"
	"sort"
	"strings"
)

// flameNode is a frame in the call tree, callers above callees.
type flameNode struct {
	name     string
	kind     frameKind
	value    int64
	children []*flameNode
}

// flame folds the stacks with weight in vals into a call tree.
func (a *analysis) flame(vals []int64) *flameNode {
	root := &flameNode{name: "all"}
	// One index for the whole tree: a map per node costs more than the
	// tree itself.
	type edge struct {
		parent *flameNode
		name   string
	}
	index := map[edge]*flameNode{}
	for id, v := range vals {
		if v == 0 {
			continue
		}
		root.value += v
		fr := a.stacks[id]
		n := root
		for i := len(fr) - 1; i >= 0; i-- {
			e := edge{n, fr[i].name}
			c := index[e]
			if c == nil {
				c = &flameNode{name: fr[i].name, kind: fr[i].kind}
				index[e] = c
				n.children = append(n.children, c)
			}
			n = c
			n.value += v
		}
	}
	root.sort()
	return root
}

// sort orders children alphabetically, as flame graphs do, so that the
// same code lands in the same place from one capture to the next.
func (n *flameNode) sort() {
	sort.Slice(n.children, func(i, j int) bool { return n.children[i].name < n.children[j].name })
	for _, c := range n.children {
		c.sort()
	}
}

// Flame graph geometry, in SVG user units.
const (
	flameWidth    = 1200.0
	flameRow      = 17.0
	flameMinWidth = 1.0 // narrower frames (under 1/1200) are left out
	flameMaxDepth = 200
	flameCharW    = 6.6 // average glyph width of the 11px font
)

// flameSVG draws n as an icicle graph (the root on top), each frame with a
// tooltip. It needs no script and no external asset.
func flameSVG(n *flameNode, unit string, id string) template.HTML {
	if n == nil || n.value == 0 {
		return ""
	}
	depth := n.depth(0)
	if depth > flameMaxDepth {
		depth = flameMaxDepth
	}
	h := float64(depth+1) * flameRow
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg class="flame" id="%s" viewBox="0 0 %.0f %.0f" width="100%%" preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg" role="img">`,
		template.HTMLEscapeString(id), flameWidth, h)
	n.draw(&sb, 0, 0, flameWidth, n.value, unit, 0)
	sb.WriteString(`</svg>`)
	return template.HTML(sb.String()) // every string in it was escaped by draw
}

func (n *flameNode) depth(d int) int {
	if d > flameMaxDepth {
		return d
	}
	m := d
	for _, c := range n.children {
		m = max(m, c.depth(d+1))
	}
	return m
}

func (n *flameNode) draw(sb *strings.Builder, x, y, w float64, total int64, unit string, d int) {
	if w < flameMinWidth || d > flameMaxDepth {
		return
	}
	title := fmt.Sprintf("%s — %s, %s", n.name, valueText(n.value, unit), strings.TrimSpace(pct(n.value, total)))
	fmt.Fprintf(sb, `<g><title>%s</title><rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="%s"/>`,
		template.HTMLEscapeString(title), x, y, w, flameRow-1, flameColor(n, d))
	if chars := int((w - 6) / flameCharW); chars >= 3 {
		fmt.Fprintf(sb, `<text x="%.1f" y="%.0f">%s</text>`, x+3, y+flameRow-5, template.HTMLEscapeString(truncate(n.name, chars)))
	}
	sb.WriteString(`</g>`)
	cx := x
	for _, c := range n.children {
		cw := w * float64(c.value) / float64(n.value)
		c.draw(sb, cx, y+flameRow, cw, total, unit, d+1)
		cx += cw
	}
}

// flameColor: warm for native code, orange for the kernel, green for JIT
// code, grey for the unknown; the shade varies by name so neighbours
// differ.
func flameColor(n *flameNode, d int) string {
	if d == 0 {
		return "#c8c8d0"
	}
	h := fnv.New32a()
	h.Write([]byte(n.name))
	v := h.Sum32()
	jitter := int(v % 40)
	switch n.kind {
	case kindKernel:
		return fmt.Sprintf("hsl(%d,85%%,%d%%)", 28+jitter/4, 55+jitter/5)
	case kindJIT:
		return fmt.Sprintf("hsl(%d,55%%,%d%%)", 100+jitter, 55+jitter/5)
	case kindUnknown:
		return fmt.Sprintf("hsl(0,0%%,%d%%)", 65+jitter/4)
	}
	return fmt.Sprintf("hsl(%d,75%%,%d%%)", jitter/2, 60+jitter/5)
}
