package intaketest

import (
	"testing"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/analysis"
	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// WriteCapture writes a capture directory under root as a capture writes
// one (the findings of package analysis, report's renderings through
// capdir), from a profile and a snapshot
// made by the test; p nil writes an empty, valid profile, snap nil no
// threads.pb.gz. It returns the directory's path.
func WriteCapture(t testing.TB, root string, info model.Info, p *profile.Profile, snap *model.Snapshot) string {
	t.Helper()
	r, err := capdir.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := &report.Capture{Info: info, Profile: p, Threads: snap}
	prof, err := report.CaptureProfile(c)
	if err != nil {
		t.Fatal(err)
	}
	analysis.Analyze(&c.Info, report.Samples(prof), snap).Into(&c.Info)
	files, err := report.CaptureFiles(c)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := r.Write(&c.Info, files)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
