// Package objfile is the one owner of what an object file says about its
// code: its ELF headers, build id and loadable segments (where each
// mapping of it is linked: File.Bias), its symbols (.symtab, .dynsym, a
// separate debug file found by build id or .gnu_debuglink, MiniDebugInfo),
// its source lines and inlined calls (DWARF), its call frame information
// (File.CFI: .eh_frame, else .debug_frame, found here and parsed by
// package internal/callframe) and a Go binary's pclntab (GoTable: names,
// lines and frame sizes, for every Go layout since 1.2; GoRuntime: where
// the Go runtime switches a thread to its system stack, and the frames a
// system stack starts with, read from its code).
// Package symbolize names addresses with it, package internal/unwind walks
// stacks with it; neither parses a file itself.
//
// A file is parsed once per stallwatch process, whatever the number of
// targets that map it and of captures taken: Open keeps every File in one
// cache keyed by the file's identity (device, inode, size, times). A File
// in use holds its descriptor; when its last user closes it the
// descriptor goes and the parsed tables stay, bounded by bytes. Each part
// is parsed the first time it is asked for; symbols depend on where debug
// files are looked for (Env) and are kept per Env.
//
// Everything read comes from the target and is untrusted: sizes are
// checked against the file before anything is allocated from them, the
// standard library's parsers run behind a recover, DWARF and xz headers
// that those parsers would trust are checked first, and every parser is
// fuzzed with its allocations measured.
package objfile
