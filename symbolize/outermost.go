package symbolize

import (
	"strings"

	"github.com/stallwatch/stallwatch/model"
)

// outermostFuncs are the functions a thread starts in: nothing called them,
// so a stack ends there. Frame-pointer walks and stack scans do not always
// know it (a goroutine's stack is reused memory, with stale frames of
// earlier goroutines above its goexit), and would go on into garbage.
var outermostFuncs = map[string]bool{
	// Go: every goroutine returns into goexit; new Ms start in clone,
	// the main thread in rt0_go.
	"runtime.goexit":   true,
	"runtime.clone":    true,
	"runtime.rt0_go":   true,
	"runtime.mstart":   false, // called by clone or rt0_go: not the end
	"_rt0_amd64":       true,
	"_rt0_amd64_linux": true,
	// glibc and musl threads and processes.
	"clone3":   true,
	"__clone3": true,
	"clone":    true,
	"__clone":  true,
	"_start":   true,
}

// Outermost reports whether l is a function a thread starts in, after
// which a stack has nothing more to say.
func Outermost(l *model.Location) bool {
	if l == nil || len(l.Lines) == 0 || l.Kind == model.KindKernel {
		return false
	}
	name := strings.TrimSuffix(l.Lines[len(l.Lines)-1].Function, ".abi0")
	return outermostFuncs[name]
}

// trimOutermost cuts a user stack (innermost first) after its first
// outermost frame.
func trimOutermost(stack []*model.Location) []*model.Location {
	for i, l := range stack {
		if Outermost(l) {
			return stack[:i+1]
		}
	}
	return stack
}
