package capture

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/monotime"
	"github.com/stallwatch/stallwatch/internal/procfs"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/sampler"
)

// Progress is reported about once a second while Record samples.
type Progress struct {
	Elapsed, Duration time.Duration
	Samples           uint64 // on-CPU samples so far
	OffCPU            uint64 // off-CPU intervals closed so far
	Lost              uint64 // records and samples the kernel dropped
	Threads           int    // threads being sampled now
}

// Record samples cfg.PID at cfg.Freq for d (or until ctx ends or the target
// exits) and writes a capture directory with trigger "manual". progress, if
// not nil, is called about once a second.
func Record(ctx context.Context, cfg Config, d time.Duration, progress func(Progress)) (*model.Result, error) {
	cfg.NoFlightRecorder = true
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	cfg.CaptureFor = d // what capture.json reports
	// The output directory is checked before the recording, not after.
	root, err := capdir.OpenRoot(cfg.Out)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	s, err := newSession(cfg, root)
	if err != nil {
		return nil, err
	}
	defer s.tp.Close()
	defer s.jvm.close()
	if !s.canSample() {
		return nil, fmt.Errorf("cannot record pid %d: %s", cfg.PID, s.plan.Summary())
	}
	smp, err := sampler.Start(s.samplerConfig(cfg.Freq, !s.cfg.NoOffCPU, -1))
	if err != nil {
		return nil, err
	}
	defer smp.Close()

	tr := model.Trigger{Kind: model.Manual, At: time.Now(), Mono: monotime.Now(), Reason: fmt.Sprintf("stallwatch record for %v", d)}
	ask := s.jvm.askPerfMap(ctx)
	rec := smp.StartRecording()
	kStart := s.kw.readAsync(true)
	snap := s.startSnapshot(ctx, smp.OffCPUSince)
	cutWhy := recordFor(ctx, d, smp, progress)
	samples := rec.Stop()
	kr := kernelReadings{start: kStart(), end: s.kw.readAsync(true)}
	f := &facts{cfg: s.cfg, tg: s.tg, trigger: tr, stats: rec.Stats(), cutWhy: cutWhy, notes: s.notes, exited: !procfs.Alive(cfg.PID), kernel: kr}
	f.snap = snap()
	f.addNote(s.jvm.javaThreads(ctx, f.snap))
	f.addNote(s.jvm.jitNames(ask))
	return s.finish(f, smp, rec, []window{{"", nil}, {"", samples}})
}

// recordFor waits like waitFor, reporting progress every second.
func recordFor(ctx context.Context, d time.Duration, smp *sampler.Sampler, progress func(Progress)) string {
	if progress == nil {
		return waitFor(ctx, d, smp.Done())
	}
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		select {
		case <-tick.C:
			st := smp.Stats()
			progress(Progress{
				Elapsed:  time.Since(start),
				Duration: d,
				Samples:  st.Samples,
				OffCPU:   st.OffCPUIntervals,
				Lost:     st.LostRecords + st.LostSamples,
				Threads:  st.ThreadsLive,
			})
		case <-smp.Done():
			return whyExited
		case <-deadline.Done():
			if ctx.Err() != nil {
				return interrupted(ctx)
			}
			return ""
		}
	}
}

// WriteSnapshot writes a capture directory of a thread snapshot alone
// (`stallwatch snapshot --out`) under cfg.Out (cfg.PID may be 0; cfg.Keep
// prunes): capture.json says what every capture's says, with a manual
// trigger at the snapshot's time and the snapshot's ptrace setting
// (cfg.NoPtrace).
func WriteSnapshot(cfg Config, snap *model.Snapshot) (*model.Result, error) {
	if snap == nil {
		return nil, errors.New("capture: WriteSnapshot: nil snapshot")
	}
	cfg.PID = snap.PID
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	root, err := capdir.OpenRoot(cfg.Out)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	tg := model.Target{PID: snap.PID, Command: snap.Command}
	tg.Executable, _ = procfs.Exe(snap.PID)
	f := &facts{
		cfg: cfg, tg: tg, snap: snap,
		trigger: model.Trigger{Kind: model.Manual, At: snap.Time},
		start:   snap.Time, end: snap.Time.Add(max(snap.Duration, time.Nanosecond)),
	}
	return f.write(root)
}
