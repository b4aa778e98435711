// Package sampler samples every thread of a running process with
// perf_event_open: on-CPU stacks from the cpu-clock software event, off-CPU
// intervals from context-switch records, each with kernel and user
// callchains and a CLOCK_MONOTONIC time. It attaches to threads as they
// appear and lets go of them as they exit, changes the sampling rate of the
// attached threads without a gap, and keeps the recent past in a bounded
// flight recorder.
//
// The sampler only collects raw samples (addresses, thread, time, weight).
// It knows nothing of heartbeats, symbols or output formats.
package sampler
