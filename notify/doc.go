// Package notify acts on what watchdogs see: it turns each watchdog.Event
// into DogStatsD alerts (package notify/alert), hook runs (notify/hook)
// and queued uploads (notify/spool, delivered by notify/upload). Every
// way stallwatch sends something out lives below it, one package each,
// and this package is the one that wires them. One
// Notifier serves every target of a stallwatch process — `watch` has one
// target, the daemon many — and For gives each watchdog its handler.
//
// Events are handed to one goroutine of the Notifier and acted on in
// order; the watchdog never waits for an alert, a hook or a disk write.
// Alerts go first: a stall's event leaves before anything slower is done.
// Queueing an upload (a synced write) runs on a goroutine of its own, so
// a slow disk never delays the next alert.
package notify
