package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/termsafe"
	"github.com/stallwatch/stallwatch/notify"
)

func uploadCommand(g *globals) *cli.Command {
	f := &uploadFlags{}
	return &cli.Command{
		Name:    "upload",
		Summary: "upload capture directories to the Datadog agent",
		Usage:   "DIR... [flags]",
		Help:    uploadHelp,
		Flags:   f.declare,
		Args:    cli.Dir,
		Run: func(ctx context.Context, inv *cli.Invocation) error {
			return uploadDirs(ctx, inv, f, g)
		},
	}
}

const uploadHelp = `
Uploads captures taken earlier (by watch, record or snapshot --out) to
the Datadog agent's profiling intake, as watch --upload does: profile.pb.gz
and threads.pb.gz, tagged with the capture's process, runtime, trigger and
stall length, and with --service, --env and --tags. A failure that may
pass (the agent down or overloaded) is tried again, up to --tries times.

Examples:
  stallwatch upload stallwatch-captures/20260105T143012.345Z-4242-stall
  stallwatch upload --upload http://agent:8126 --service bank stallwatch-captures/*-stall

Prints each directory uploaded; exits 1 if any was not, naming why.`

type uploadFlags struct {
	datadog datadogFlags
	tries   int
}

func (f *uploadFlags) declare(fs *cli.FlagSet) {
	fs.Int(&f.tries, "tries", 3, "try each upload at most `N` times while the agent is down or failing")
	f.datadog.declare(fs)
}

func uploadDirs(ctx context.Context, inv *cli.Invocation, f *uploadFlags, g *globals) error {
	dirs := inv.Positional()
	switch {
	case len(dirs) == 0:
		return cli.UsageErrorf("name the capture directories to upload")
	case f.tries <= 0:
		return cli.UsageErrorf("--tries %d: must be positive", f.tries)
	case f.datadog.upload == off:
		return cli.UsageErrorf("--upload off: nothing to do")
	}
	if err := f.datadog.check(); err != nil {
		return err
	}
	log := g.logger(inv.Stderr, "stallwatch upload", false)
	u, err := notify.NewUploader(f.datadog.options("", log))
	if errors.Is(err, notify.ErrNoAgent) {
		return cli.UsageErrorf("%v", err)
	}
	if err != nil {
		return err
	}
	w := termsafe.NewWriter(inv.Stdout)
	var failed int
	for _, dir := range dirs {
		if err := notify.UploadDir(ctx, u, dir, f.tries); err != nil {
			failed++
			log.Error("not uploaded", "dir", dir, "err", err)
			continue
		}
		fmt.Fprintf(w, "uploaded %s\n", dir)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d captures not uploaded to %s", failed, len(dirs), u.URL())
	}
	return nil
}
