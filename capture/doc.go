// Package capture runs one capture of a target process and writes it to
// disk: the sampler's flight recorder and a burst of high-rate sampling,
// the thread snapshot, symbolization at each sample's time, and the capture
// directory (profile.pb.gz, threads.pb.gz, report.txt, report.html,
// capture.json). `stallwatch record` and the watchdog both capture through
// it; the watchdog decides when, this package decides how.
//
// It gathers the facts of a capture into capture.json (capdir.NewInfo and
// the counts, settings and notes), has package report render the files,
// and has package capdir write them: the output directory is opened once,
// when a Session opens or a recording starts, so that an unsafe or
// unwritable --out is refused before anything is sampled. A capture hands
// back a capdir.Result (directory, capture.json, findings), the type its
// callers share without importing this package.
//
// What is known of the target (package target: its files, unwind tables,
// symbols, JIT sources, memory) is opened once per Session and shared by
// the snapshot and the resolving of every capture's samples; it is
// refreshed at the start of each capture (code loaded since) and before
// its samples are resolved.
package capture
