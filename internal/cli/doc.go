// Package cli is stallwatch's command table: each command and its flags
// are declared once, parsed with the standard library's flag package, and
// rendered from that one declaration as --help, a man page, and bash and
// zsh completion scripts, so that the four never disagree.
//
// It adds to package flag what people expect of a command line: flags
// listed as --pid with a short form -p (one table of short forms for
// every command, short.go, so that a letter means one flag everywhere), help on standard output when asked
// for and on standard error only after a mistake, flags before or after
// the arguments, "--" ending the flags, and usage errors told apart from
// failures by type (UsageError) so that the caller maps them to exit
// codes. What the commands do is not its concern.
package cli
