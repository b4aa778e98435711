package capture

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/internal/kernelctx"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/report"
)

// TestPeriods: a session that profiles continuously, with no flight
// recorder, cuts its samples into contiguous periods: each ends where the
// next begins on both clocks, every sample is stamped inside its period,
// its CPU time is the target's within 10% and its samples rate × CPU
// time (more by the host's steal time, which the sampler's clock counts
// and the scheduler's CPU time does not: kernelctx.CPUTimes.Stolen); a
// stall capture in the middle leaves its samples in its period (cpu-time
// still exact, the capture named in a note); the target's exit ends the
// last period at the exit, and nothing follows.
func TestPeriods(t *testing.T) {
	testutil.RequirePerf(t)
	bin := testutil.BuildGo(t, "spin")
	tg := testutil.Start(t, bin, "-threads", "2", "-depth", "2")
	tg.WaitLine(t, "ready", 10*time.Second)
	const freq = 97
	s, err := Open(Config{PID: tg.Pid, Out: t.TempDir(), Freq: 499, NoFlightRecorder: true, CaptureFor: time.Second,
		Snapshot: true, Profile: true, ProfileFreq: freq, NoOffCPU: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var periods []*Period
	var cpu, steal []time.Duration // the target's CPU time and the host's steal in each period
	c0, err := testutil.CPUTime(tg.Pid)
	if err != nil {
		t.Fatal(err)
	}
	s0, err := stolen()
	if err != nil {
		t.Fatal(err)
	}
	cut := func() {
		t.Helper()
		testutil.WaitCPU(t, tg.Pid, 1500*time.Millisecond, 30*time.Second)
		c, err := testutil.CPUTime(tg.Pid)
		if err != nil {
			t.Fatal(err)
		}
		p, err := s.Period(Now())
		if err != nil {
			t.Fatal(err)
		}
		st, err := stolen()
		if err != nil {
			t.Fatal(err)
		}
		periods, cpu, steal = append(periods, p), append(cpu, c-c0), append(steal, st-s0)
		c0, s0 = c, st
	}
	cut()
	res, err := s.Capture(context.Background(), model.Trigger{Kind: model.Stall, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	cut()
	cut()

	for i, p := range periods {
		if i > 0 && (p.Start.Mono != periods[i-1].End.Mono || !p.Start.Wall.Equal(periods[i-1].End.Wall)) {
			t.Errorf("period %d begins at %v (%d), period %d ends at %v (%d)", i, p.Start.Wall, p.Start.Mono, i-1, periods[i-1].End.Wall, periods[i-1].End.Mono)
		}
		if p.Exited || p.Freq != freq || p.OffCPU {
			t.Errorf("period %d: exited %v, %d Hz, off-CPU %v", i, p.Exited, p.Freq, p.OffCPU)
		}
		checkPeriodProfile(t, i, p, tg.Pid)
		got := time.Duration(sum(p.Profile, 1))
		if d := got - cpu[i]; d < -cpu[i]/10 || d > cpu[i]/10+steal[i] {
			t.Errorf("period %d: %v of cpu-time for %v of the target's CPU time (%v stolen from the host)", i, got, cpu[i], steal[i])
		}
		n := sum(p.Profile, 0)
		if want, most := int64(cpu[i].Seconds()*freq), int64((cpu[i]+steal[i]).Seconds()*freq); i != 1 && (n < want*9/10 || n > most*11/10) {
			t.Errorf("period %d: %d samples for %v of CPU (%v stolen from the host) at %d Hz, want %d to %d", i, n, cpu[i], steal[i], freq, want*9/10, most*11/10)
		}
	}
	mid := periods[1]
	if len(mid.Captures) != 1 || mid.Captures[0].Dir != res.Dir || mid.Captures[0].Freq != 499 {
		t.Errorf("the period of the capture names captures %+v, want %s at 499 Hz", mid.Captures, res.Dir)
	}
	// The capture's own samples (weighed at its period) are the period's.
	c, err := report.ReadCapture(context.Background(), res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	fast := int64(time.Second / 499)
	var inCapture, inPeriod int64
	for _, smp := range c.Profile.Sample {
		if smp.Label[model.LabelPhase][0] == model.PhaseDuring {
			inCapture += smp.Value[0]
		}
	}
	for _, smp := range mid.Profile.Sample {
		if smp.Value[1] == fast*smp.Value[0] {
			inPeriod += smp.Value[0]
		}
	}
	if inCapture < 50 || inPeriod < inCapture*98/100 || inPeriod > inCapture {
		t.Errorf("the capture took %d on-CPU samples at 499 Hz; its period holds %d of them", inCapture, inPeriod)
	}
	if !hasNote(mid.Notes, res.Dir) {
		t.Errorf("the period's notes do not name the capture %s: %q", res.Dir, mid.Notes)
	}

	if err := tg.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.smp.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the sampler did not see the target exit")
	}
	last, err := s.Period(Now())
	if err != nil {
		t.Fatal(err)
	}
	if !last.Exited || last.Start.Mono != periods[2].End.Mono || last.End.Mono > s.smp.Stats().ExitTime && s.smp.Stats().ExitTime != 0 {
		t.Errorf("the last period [%d, %d], exited %v; the one before ended at %d, the exit at %d", last.Start.Mono, last.End.Mono, last.Exited, periods[2].End.Mono, s.smp.Stats().ExitTime)
	}
	if _, err := s.Period(Now()); !errors.Is(err, model.ErrTargetExited) {
		t.Errorf("a period after the exit: %v, want ErrTargetExited", err)
	}
}

// checkPeriodProfile checks what a period's profile must hold: on-CPU
// sample types only, the labels Datadog's timeline reads, every sample
// stamped inside the period, and no phase.
func checkPeriodProfile(t *testing.T, i int, p *Period, pid int) {
	t.Helper()
	prof := p.Profile
	if err := prof.CheckValid(); err != nil {
		t.Fatalf("period %d: %v", i, err)
	}
	if len(prof.SampleType) != 2 || prof.SampleType[0].Type != model.TypeCPUSamples || prof.SampleType[1].Type != model.TypeCPUTime || prof.DefaultSampleType != model.TypeCPUTime {
		t.Errorf("period %d: sample types %v (default %s), want cpu-samples and cpu-time", i, prof.SampleType, prof.DefaultSampleType)
	}
	if prof.TimeNanos != p.Start.Wall.UnixNano() || prof.DurationNanos != int64(p.End.Wall.Sub(p.Start.Wall)) {
		t.Errorf("period %d: profile time %d + %d, period %v to %v", i, prof.TimeNanos, prof.DurationNanos, p.Start.Wall, p.End.Wall)
	}
	from, to := p.Start.Wall.UnixNano(), p.End.Wall.UnixNano()
	for _, smp := range prof.Sample {
		end := smp.NumLabel[model.LabelEndTime]
		if len(end) != 1 || end[0] < from || end[0] > to {
			t.Fatalf("period %d [%d, %d]: a sample stamped %v", i, from, to, end)
		}
		if smp.Label[model.LabelThreadID] == nil || smp.Label[model.LabelThreadName] == nil || smp.Label["process_id"][0] != strconv.Itoa(pid) || smp.Label[model.LabelPhase] != nil {
			t.Fatalf("period %d: labels %v", i, smp.Label)
		}
	}
}

func sum(p *profile.Profile, i int) int64 {
	var n int64
	for _, s := range p.Sample {
		n += s.Value[i]
	}
	return n
}

func hasNote(notes []string, sub string) bool {
	for _, n := range notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

// stolen is the host's steal time so far.
func stolen() (time.Duration, error) {
	c, err := kernelctx.ReadProcStat()
	return c.Stolen(), err
}
