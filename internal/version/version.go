// Package version says which stallwatch this is, for `stallwatch version`,
// capture.json and the profiles' comments.
package version

import "runtime/debug"

// Version is set at link time by the Makefile
// (-ldflags "-X github.com/stallwatch/stallwatch/internal/version.Version=...").
var Version = ""

// String returns Version, else the VCS revision Go recorded, else "dev".
func String() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "dev-" + s.Value[:12]
			}
		}
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
	}
	return "dev"
}
