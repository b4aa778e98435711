// Package textfmt is how stallwatch puts a capture into words, the one
// way for the findings (package analysis) and the renderings (package
// report): durations, counts and shares as a person reads them ("4.25s",
// "12,345", "62%"); names from the target made safe for a terminal
// (package termsafe); frames and stacks as a person reads them (inlined
// functions as frames, the program's own code told from libc's and the
// runtime's wrappers, stacks told apart by function names, one line per
// stack for a first screen); and threads in a sentence (its label, what
// it is doing, the frame that says where it is).
//
// It reads the capture model (package model) and nothing else of
// stallwatch.
package textfmt
