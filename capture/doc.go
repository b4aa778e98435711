// Package capture runs one capture of a target process and writes it to
// disk: the sampler's flight recorder and a burst of high-rate sampling,
// the thread snapshot, symbolization at each sample's time, and the capture
// directory (profile.pb.gz, threads.pb.gz, report.txt, report.html,
// capture.json). `stallwatch record` and the watchdog both capture through
// it; the watchdog decides when, this package decides how.
package capture
