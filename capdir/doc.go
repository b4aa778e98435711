// Package capdir owns the capture directory: its name and files, how it
// is written, read back, updated and pruned. What capture.json says is
// the capture model's (package model: Info, its schema in that package's
// doc); this package begins it (NewInfo: the version, the host, the
// trigger and the target) and keeps it on disk.
//
// It knows file names and capture.json, not how a profile or a report is
// made: it imports the model and no sampling, symbol or pprof code, so
// that the watchdog, alerts and hooks can use a capture's facts without
// dragging those in; the capture package fills it, the report package
// renders it.
//
// # Writing
//
// OpenRoot opens the directory captures go under (--out) once, creating
// it, and refuses one another user can write (internal/safedir). Root.Write
// writes OUT/<UTC time>-<pid>-<trigger>/ (for example
// 20260105T143012.345Z-4242-stall) into a hidden directory first and
// renames it into place with RENAME_NOREPLACE, so a reader never sees it
// half written and two captures never share one; each file is synced
// before. Everything is written relative to directory descriptors, never
// through a path. The files are the caller's (File: a name and a writer);
// capture.json is written last. Root.Update rewrites capture.json (and the
// files the caller renders again) atomically; Root.Prune keeps the newest
// captures. NewInfo begins every capture.json, so that every writer says
// the same things the same way.
//
// # Reading
//
// Open reads a capture directory's capture.json; Dir.Open and Dir.ReadFile
// open its other files (regular files only, sizes checked before reading).
package capdir
