package textfmt

import (
	"encoding/binary"
	"fmt"
	"path"
	"strings"

	"github.com/stallwatch/stallwatch/model"
)

// Frame is one function of a stack as a person reads it: inlined
// functions are frames of their own, and every name from the target is
// cleaned for printing.
type Frame struct {
	Name   string // function name
	File   string // base name of the source file, "" if unknown
	Line   int64
	Module string // base name of the mapping's file
	Kind   model.FrameKind
}

func (f Frame) String() string {
	if f.File != "" && f.Line > 0 {
		return fmt.Sprintf("%s (%s:%d)", f.Name, f.File, f.Line)
	}
	return f.Name
}

// LocationFrames expands a location into frames, innermost first. A
// function without a name is its address.
func LocationFrames(l *model.Location) []Frame {
	mod := ""
	if l.Mapping != nil {
		mod = Clean(path.Base(l.Mapping.File))
	}
	if len(l.Lines) == 0 {
		return []Frame{{Name: fmt.Sprintf("%#x", l.Addr), Module: mod, Kind: l.Kind}}
	}
	out := make([]Frame, 0, len(l.Lines))
	for _, ln := range l.Lines {
		fr := Frame{Module: mod, Kind: l.Kind, Line: ln.Line, Name: Clean(ln.Function)}
		if fr.Name == "" {
			fr.Name = Clean(ln.SystemName)
		}
		if fr.Name == "" {
			fr.Name = fmt.Sprintf("%#x", l.Addr)
		}
		if ln.File != "" {
			fr.File = Clean(path.Base(ln.File))
		}
		out = append(out, fr)
	}
	return out
}

// SystemCode says whether a function is a wrapper a person looks past to
// find the program's own code: libc and the dynamic loader, and the Go
// runtime and syscall packages.
func SystemCode(module, function string) bool {
	for _, p := range []string{"libc.so", "libc-", "libpthread", "ld-linux", "ld-musl", "libc.musl"} {
		if strings.HasPrefix(module, p) {
			return true
		}
	}
	for _, p := range []string{"runtime.", "internal/runtime/", "runtime/internal/", "syscall.", "internal/syscall/",
		// cgo's thread start-up, below the Go runtime's frames
		"crosscall1", "crosscall2", "_cgo_", "x_cgo_", "threadentry",
		// an address in no mapping, or the mark of a stack cut short
		// (symbolize's CutLocation): a walk's end, not the program's code
		"[unknown]", "[truncated: "} {
		if strings.HasPrefix(function, p) {
			return true
		}
	}
	return false
}

// ownCode says whether a frame is of the program's own code: neither the
// kernel's nor a wrapper's.
func ownCode(f Frame) bool {
	return f.Kind != model.KindKernel && !SystemCode(f.Module, f.Name)
}

// WaitSite is the index of the innermost frame of the program's own code
// in a stack — a Java thread's, its innermost Java frame (the JVM's own
// frames above it are the runtime's, as the Go runtime's are a
// goroutine's) —; failing that, of the innermost user frame; failing
// that, 0. Where the stack has Python frames (read from CPython's
// memory), the program's own code is the Python code and the
// interpreter's C frames are plumbing, as libc is.
func WaitSite(fr []Frame) int {
	for i, f := range fr {
		if f.Module == model.JavaMapping {
			return i
		}
	}
	user := -1
	python := HasPython(fr)
	for i, f := range fr {
		if f.Kind == model.KindKernel {
			continue
		}
		if !SystemCode(f.Module, f.Name) && !(python && InterpreterCode(f)) {
			return i
		}
		if user < 0 {
			user = i
		}
	}
	return max(user, 0)
}

// HasPython says whether a stack has Python frames.
func HasPython(fr []Frame) bool {
	for _, f := range fr {
		if f.Kind == model.KindPython {
			return true
		}
	}
	return false
}

// InterpreterCode says whether a native frame is CPython's own (its
// executable or libpython).
func InterpreterCode(f Frame) bool {
	return f.Kind != model.KindPython && (strings.HasPrefix(f.Module, "python") || strings.HasPrefix(f.Module, "libpython"))
}

// SystemOnly says whether a stack has no frame of the program's own code.
func SystemOnly(fr []Frame) bool {
	for _, f := range fr {
		if ownCode(f) {
			return false
		}
	}
	return true
}

// StackString joins frames innermost first with "←"; max > 0 keeps that
// many frames and says how many were left out.
func StackString(fr []Frame, max int) string {
	var sb strings.Builder
	n := len(fr)
	if max > 0 && n > max {
		n = max
	}
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteString(" ← ")
		}
		sb.WriteString(fr[i].Name)
	}
	if n < len(fr) {
		fmt.Fprintf(&sb, " ← … (%d more)", len(fr)-n)
	}
	return sb.String()
}

// StackSummary prints a stack on one line for the first screen: the
// innermost frame (where the time went), then, past the kernel's frames and
// the wrappers of libc and the runtime, the program's own frames, at most
// max names in all. "…" marks frames left out.
func StackSummary(fr []Frame, max int) string {
	if len(fr) == 0 {
		return "[no stack]"
	}
	app := -1
	for i := 1; i < len(fr); i++ {
		if ownCode(fr[i]) {
			app = i
			break
		}
	}
	if app < 0 {
		return StackString(fr, max)
	}
	parts := []string{fr[0].Name}
	if app > 1 {
		parts = append(parts, "…")
	}
	i := app
	for shown := 1; i < len(fr) && shown < max; i, shown = i+1, shown+1 {
		parts = append(parts, fr[i].Name)
	}
	if i < len(fr) {
		parts = append(parts, fmt.Sprintf("… (%d more)", len(fr)-i))
	}
	return strings.Join(parts, " ← ")
}

// Stacks numbers the distinct stacks of a profile by the names of their
// frames, first seen first (pprof keeps stacks apart by address; a person
// reading a report does not care which line of a loop a sample hit).
// Each location's frames are worked out once.
type Stacks struct {
	// Frames are the frames of each stack, by id, innermost first.
	Frames [][]Frame

	locs    map[*model.Location]*locFrames
	nameIDs map[string]uint64
	byKey   map[string]int
	key     []byte
	// bySlice numbers the stacks AddShared was given, by their slice.
	bySlice map[sliceKey]int
}

// sliceKey is a stack slice's identity: its backing array and length.
type sliceKey struct {
	first **model.Location
	n     int
}

type locFrames struct {
	frames []Frame
	key    []byte // the frames' name ids
}

// NewStacks returns an empty table.
func NewStacks() *Stacks {
	return &Stacks{locs: map[*model.Location]*locFrames{}, nameIDs: map[string]uint64{}, byKey: map[string]int{}}
}

// AddShared is Add for a stack slice that never changes once given (a
// profile's samples share one slice per stack): the same slice again is
// answered by its identity, without a look at its frames.
func (s *Stacks) AddShared(stack []*model.Location) int {
	if len(stack) == 0 {
		return s.Add(stack)
	}
	k := sliceKey{&stack[0], len(stack)}
	if id, ok := s.bySlice[k]; ok {
		return id
	}
	id := s.Add(stack)
	if s.bySlice == nil {
		s.bySlice = map[sliceKey]int{}
	}
	s.bySlice[k] = id
	return id
}

// Add returns the id of a stack (innermost first), numbering it if it is
// new.
func (s *Stacks) Add(stack []*model.Location) int {
	key := s.key[:0]
	for _, l := range stack {
		key = append(key, s.location(l).key...)
	}
	s.key = key
	if id, ok := s.byKey[string(key)]; ok {
		return id
	}
	id := len(s.Frames)
	s.byKey[string(key)] = id
	var fr []Frame
	for _, l := range stack {
		fr = append(fr, s.locs[l].frames...)
	}
	s.Frames = append(s.Frames, fr)
	return id
}

func (s *Stacks) location(l *model.Location) *locFrames {
	lf := s.locs[l]
	if lf != nil {
		return lf
	}
	lf = &locFrames{frames: LocationFrames(l)}
	for _, f := range lf.frames {
		id, ok := s.nameIDs[f.Name]
		if !ok {
			id = uint64(len(s.nameIDs))
			s.nameIDs[f.Name] = id
		}
		lf.key = binary.AppendUvarint(lf.key, id)
	}
	s.locs[l] = lf
	return lf
}
