package testutil

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestScanPerfData reads perf's own recordings of a busy shell, with frame
// pointers and with stack copies: as many samples as perf report counts,
// each with a callchain that starts with a context marker (under
// --call-graph dwarf perf asks for none of the user's, so a sample taken
// in user code has none), and under --call-graph dwarf the user registers
// and a copy no larger than asked.
func TestScanPerfData(t *testing.T) {
	RequirePerf(t)
	perf := RequireTool(t, "perf")
	for _, tc := range []struct {
		name      string
		callGraph []string
		copy      int
	}{
		{"fp", []string{"-g"}, 0},
		{"dwarf", []string{"--call-graph", "dwarf,4096"}, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "perf.data")
			args := append([]string{"record", "-q", "-F", "2000", "-k", "mono", "-o", data}, tc.callGraph...)
			args = append(args, "--", "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
			if out, err := exec.Command(perf, args...).CombinedOutput(); err != nil {
				t.Fatalf("perf record: %v\n%s", err, out)
			}
			want, err := PerfSamples(perf, data)
			if err != nil || want == 0 {
				t.Fatalf("perf report --stats: %d samples, %v", want, err)
			}
			n := 0
			info, err := ScanPerfData(data, func(s *PerfDataSample) {
				n++
				if (len(s.Chain) > 0 || tc.copy == 0) && (len(s.Chain) == 0 || s.Chain[0] < ^uint64(4095)+1) {
					t.Errorf("sample %d: callchain %x does not start with a context", n, s.Chain)
				}
				if s.Time == 0 || s.TID == 0 || s.Period == 0 {
					t.Errorf("sample %d: time %d, tid %d, period %d", n, s.Time, s.TID, s.Period)
				}
				if tc.copy > 0 && (!s.HasRegs || s.SP == 0 || len(s.Stack) > tc.copy) {
					t.Errorf("sample %d: registers %v (sp %#x), %d bytes of stack of %d", n, s.HasRegs, s.SP, len(s.Stack), tc.copy)
				}
				if tc.copy == 0 && (s.HasRegs || s.Stack != nil) {
					t.Errorf("sample %d: registers or a stack copy without --call-graph dwarf", n)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if n != want {
				t.Errorf("%d samples read, perf report counts %d", n, want)
			}
			found := false
			for _, name := range info.Comms {
				found = found || name == "sh"
			}
			if !found {
				t.Errorf("no COMM record names sh: %v", info.Comms)
			}
		})
	}
}
