// Package watchdog decides when a target process has stalled and asks for a
// capture: it owns the heartbeat sources (a file the target touches, an
// HTTP probe, and the target's own CPU and scheduling progress; the
// DogStatsD metrics a target sends are package watchdog/dogstatsd's, the
// proxy and the passive tap), the stall detector's states
// (healthy → stalled → capturing → cooldown → recovered), and the capture
// policy (capture length, recapture of a stall that lasts, a rate limit,
// captures on demand).
//
// A stall is a source silent for stall-after after it has beaten once: a
// file, a metric or an endpoint counts from the target's first beat (a
// service may take a while to start beating), the target's own progress
// from the start of watching (a process frozen before stallwatch came
// stalls all the same).
//
// How a capture is taken is not its concern: a Capturer does that. The
// watchdog never blames the target for its own absence: when it wakes up
// late (the host was suspended, or its own process was starved of CPU) it
// re-arms instead of reporting a stall, and a target that exited is
// reported as exited.
package watchdog
