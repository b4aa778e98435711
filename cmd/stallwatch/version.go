package main

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/stallwatch/stallwatch/internal/version"
)

func init() {
	register(command{
		name:    "version",
		summary: "print stallwatch's version",
		run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
			fs := newFlagSet("version", "stallwatch version", "Prints the version, the Go version and the platform.", stderr)
			if err := parseFlags(fs, args); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "stallwatch %s (%s, %s/%s)\n", version.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	})
}
