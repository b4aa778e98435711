package runtimes

// Ruby is CRuby (MRI). stallwatch knows it by its programs only: its
// uploads and alerts carry the `runtime` tag.
var Ruby = &Runtime{ID: "ruby", Name: "Ruby", Executables: []string{"ruby"}, Libraries: []string{"libruby"}}
