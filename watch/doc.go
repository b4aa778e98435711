// Package watch watches one target process, the one way for `stallwatch
// watch` (one target) and the daemon (each process its rules select):
// the heartbeats it gives off made into sources, its capture session
// opened and closed by one policy, its watchdog run, and how it ended.
//
// Heartbeats (Settings.Heartbeat, the names of `watch`'s flags): files
// and an HTTP endpoint, {pid} and {root} expanded for the target; the
// process's progress, read by a shared watchdog.Poller (Config.Poller: a
// daemon's hundreds of targets in the same wake-ups) with the target's
// start time, so that a pid the kernel reuses is not taken for it; a
// DogStatsD tap's heartbeat from Taps, one packet socket per port shared
// by every target; and what the caller made beforehand (Config.Sources:
// watch's DogStatsD proxy, bound before its child starts to be given its
// address). An HTTP heartbeat's failures are logged.
//
// The capture session (package capture: the target's symbols, unwind
// tables and, with --baseline-freq, the flight recorder) follows one
// policy: with a flight recorder or a continuous profile it opens when
// the watch starts (Open) and stays open, since it samples from then on;
// without either it opens at the first capture and closes after
// SessionIdle without one (five minutes), so that a process watching
// many idle targets holds none of their symbol tables. A Gate admits
// each capture (the daemon's host-wide limits); Close waits for a
// capture in progress before it closes the session.
//
// The continuous profile (Settings.ProfilePeriod, package continuous)
// begins when the session opens, on the caller's Profiler (`watch` has
// one of its own, the daemon one for every target), and ends, its last
// period cut, before the session closes. The caller may profile less
// (ProfileAt: a lower rate, no off-CPU samples, a mark on the periods)
// or not at all until it says again (DropProfile): the daemon's
// host-wide budget.
//
// How a watch ends: Run returns nil when its context ends (a capture in
// progress is cut short and written first) and ErrTargetExited when the
// target exits; Open gives ErrTargetExited for a target gone already,
// whatever found it gone (package capture maps a /proc file that
// vanished to it). What a command makes of that (the child's status, an
// exit code) is the command's.
package watch
