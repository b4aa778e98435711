package sampler

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stallwatch/stallwatch/internal/procfs"
)

// Configurations that cannot work are refused before anything is opened.
func TestStartRefusesBadConfig(t *testing.T) {
	self := os.Getpid()
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no pid", Config{}, "not a process id"},
		{"negative frequency", Config{PID: self, Freq: -1}, "negative"},
		{"frequency above the machine's limit", Config{PID: self, Freq: 1 << 30}, "is above"},
		{"ring smaller than a record", Config{PID: self, Freq: 99, RingBytes: 4096, DumpOffCPU: 8192, OffCPU: true}, "smaller than the largest record"},
		{"negative ring", Config{PID: self, RingBytes: -1}, "negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Start(c.cfg)
			if err == nil {
				s.Close()
				t.Fatalf("Start(%+v) succeeded", c.cfg)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want it to say %q", err, c.want)
			}
		})
	}
}

// TestFreqLimit: the limit is the sysctl's or cpu-clock's, whichever is
// lower, and a rate above it is a *FreqError that says which.
func TestFreqLimit(t *testing.T) {
	sysctl, err := procfs.Sysctl(maxSampleRate)
	if err != nil {
		t.Fatal(err)
	}
	limit, bySysctl := FreqLimit()
	if want := min(sysctl, cpuClockMaxFreq); limit != want || bySysctl != (sysctl < cpuClockMaxFreq) {
		t.Errorf("FreqLimit() = %d, %v with the sysctl at %d; want %d", limit, bySysctl, sysctl, want)
	}
	var fe *FreqError
	if err := checkFreq(limit + 1); !errors.As(err, &fe) || fe.Limit != limit || !errors.Is(err, ErrFreq) {
		t.Errorf("checkFreq(%d) = %v, want a *FreqError at %d", limit+1, err, limit)
	}
	if err := checkFreq(limit); err != nil {
		t.Errorf("checkFreq(%d) at the limit: %v", limit, err)
	}
}

func TestDumpSize(t *testing.T) {
	cases := []struct{ in, def, want int }{
		{0, 2048, 2048},
		{-1, 2048, 0},
		{1, 2048, 8},
		{1 << 20, 2048, maxDump},
		{0, 0, 0},
	}
	for _, c := range cases {
		want := c.want
		if userRegsMask == 0 {
			want = 0
		}
		if got := dumpSize(c.in, c.def); got != want {
			t.Errorf("dumpSize(%d, %d) = %d, want %d", c.in, c.def, got, want)
		}
	}
}
