// Package continuous profiles targets continuously: every period (a
// minute by default, --profile-period), the samples of that period as one
// profile per target, written under the output directory and, with an
// agent, uploaded through the same queue as the captures, in the form
// Datadog's native profiler sends — so that a service's profile page has
// something between stalls, and a stall capture has an hour before it to
// be compared with.
//
// # Periods
//
// A Profiler keeps one schedule for all its targets (one goroutine, one
// wake-up a second at most) and asks each target's capture session for
// its period at its end (capture.Session.Period): the session cuts its
// samples there, each sample in exactly one period, so the end of one
// period is the start of the next on both clocks; in wall time a period
// is as long as on CLOCK_MONOTONIC, until NTP has moved the wall clock a
// millisecond from it (then the periods follow the wall clock again). A
// period is never longer than the period asked for:
//
//   - the target's exit cuts its last period at the exit (marked
//     target_exited), and nothing follows it;
//   - when stallwatch itself did not run — starved of CPU, or the host
//     suspended — its wake-up comes late (later than a second and the
//     schedule's tick), and what its sampler's rings held meanwhile may
//     be lost: the stretch becomes periods of its own, cut where
//     stallwatch last ran and where it ran again (period_cut:
//     stallwatch_starved) and marked with how long it did not run in
//     each (stallwatch_starved_seconds) and the records the kernel
//     dropped;
//   - stopping (SIGTERM, a reload that drops the target) cuts the period
//     in progress at that moment (marked stopped).
//
// A mark is a tag of the upload (period_cut) and a note in the profile's
// comments. A stall capture sampled during a period leaves its samples in
// it (the session's doing; a note names the capture).
//
// # Files
//
// Each period is a pprof file, OUT/profiles/PID-PROCESS/START.pb.gz (START
// the period's start, UTC, to the microsecond), written atomically
// through directories stallwatch opened itself (package internal/safedir).
// The files are kept for Config.Keep (--profile-keep, a day) and within
// Config.MaxBytes (--profile-max-bytes, 1 GiB) across all targets, the
// oldest going first; a file whose upload is still queued is kept until
// it is sent or the queue's own bounds drop it. Range reads the periods of
// a time range back, merged, for `stallwatch report`.
//
// # Uploads
//
// With a queue (Config.Queue: the spool of package notify), each written
// period is queued as one upload: event.json with start and end the
// period's, family native, and tags_profiler with the uploader's (service,
// env, version, host, the user's), the target's own, the process's
// (upload.ProcessTags: process_id, process, runtime, profiler_version) —
// the same a stall capture of that process carries, so that both sit on
// one timeline — and the period's marks. The queue delivers oldest first,
// survives restarts and holds within its bounds while the agent is down.
package continuous
