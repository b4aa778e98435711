package runtimes

// Erlang is the BEAM, Erlang's and Elixir's virtual machine. stallwatch
// knows it by its programs only: its uploads and alerts carry the
// `runtime` tag.
var Erlang = &Runtime{ID: "erlang", Name: "the BEAM", Executables: []string{"beam.smp", "beam"}}
