package runtimes

// Bun runs JavaScript on JavaScriptCore. stallwatch knows it by its
// program only: its uploads and alerts carry the `runtime` tag.
var Bun = &Runtime{ID: "bun", Name: "Bun", Executables: []string{"bun"}}
