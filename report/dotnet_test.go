package report_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

func TestFindingDotnet(t *testing.T) {
	// .NET is not on this machine: a stand-in whose functions carry the
	// names of CoreCLR's suspension, run as "dotnet" (see its source).
	gxx := testutil.RequireTool(t, "g++")
	dotnet := filepath.Join(t.TempDir(), "dotnet")
	out, err := exec.Command(gxx, "-O1", "-g", "-pthread", "-fno-omit-frame-pointer", "-fno-inline", "-fno-optimize-sibling-calls",
		"-o", dotnet, testutil.Testdata(t, "stalls", "dotnet_standin.cpp")).CombinedOutput()
	if err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	tg := testutil.Start(t, dotnet, "3")
	tg.WaitLine(t, "ready", 10*time.Second)
	busy := tidOf(t, tg.Pid, ".NET busy")
	c := record(t, tg.Pid)
	f := mustOnly(t, c, model.FindingRuntimePause)
	if f.Runtime != "dotnet" || len(f.TIDs) == 0 || f.TIDs[0] != busy || !strings.Contains(f.Summary, "Program_Spin_NoGCPoll") ||
		!strings.Contains(strings.Join(f.Functions, " "), "ThreadSuspend::SuspendRuntime") {
		t.Errorf("the .NET suspension should name the busy thread %d (Program_Spin_NoGCPoll) first and ThreadSuspend::SuspendRuntime: %+v", busy, f)
	}
}
