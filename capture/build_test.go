package capture

import (
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/jit"
	"github.com/stallwatch/stallwatch/symbolize"
)

// TestNotesJITBound: what the JIT index's memory bound cost a capture is
// said in its notes, never dropped silently.
func TestNotesJITBound(t *testing.T) {
	f := &facts{symStats: symbolize.Stats{JIT: []jit.SourceInfo{
		{Path: "/tmp/jit-1.dump", Kind: jit.KindJitdump, Dropped: 3, Forgotten: 5},
		{Path: "/tmp/jit-2.dump", Kind: jit.KindJitdump},
	}}}
	notes := strings.Join(f.allNotes(), "\n")
	if !strings.Contains(notes, "JIT symbols /tmp/jit-1.dump: at the index's memory bound, 3 live code ranges were dropped (oldest first) and 5 replaced ones forgotten") {
		t.Errorf("notes:\n%s", notes)
	}
	if strings.Contains(notes, "jit-2.dump") {
		t.Errorf("a file the bound cost nothing has a note:\n%s", notes)
	}
}
