package runtimes_test

import (
	"slices"
	"testing"

	"github.com/stallwatch/stallwatch/analysis"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify/upload"
	"github.com/stallwatch/stallwatch/runtimes"
)

// TestFindingsAndUploadsAgree: the findings and the uploads know the same
// runtimes by the same names, from one table: each executable of each
// descriptor (and a versioned one) gives the runtime's ID to the
// findings' analysis, to capture.json and to the upload's `runtime` tag.
func TestFindingsAndUploadsAgree(t *testing.T) {
	for _, r := range runtimes.All() {
		for _, exe := range r.Executables {
			for _, name := range []string{"/usr/bin/" + exe, "/usr/bin/" + exe + "3.11"} {
				info := &model.Info{PID: 1, Executable: name, Command: []string{name}}
				a := analysis.Analyze(info, nil, nil)
				a.Into(info)
				if a.Runtime != r || info.Runtime != r.ID {
					t.Errorf("%s: the analysis recognises %v (%q), want %s", name, a.Runtime, info.Runtime, r.ID)
				}
				if got := upload.RuntimeOf(name, nil); got != r.ID {
					t.Errorf("%s: the upload's runtime %q, want %s", name, got, r.ID)
				}
				if tags := upload.CaptureTags(info); !slices.Contains(tags, "runtime:"+r.ID) {
					t.Errorf("%s: the upload's tags %v lack runtime:%s", name, tags, r.ID)
				}
			}
		}
	}
}
