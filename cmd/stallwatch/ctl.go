package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stallwatch/stallwatch/daemon"
	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/termsafe"
)

func ctlCommand(g *globals) *cli.Command {
	return &cli.Command{
		Name:    "ctl",
		Summary: "talk to a running stallwatch daemon: status, capture a process",
		Help: `
Sends one request to the daemon's control socket, which only root and the
daemon's own user may use.`,
		Commands: []*cli.Command{ctlStatusCommand(), ctlCaptureCommand()},
	}
}

// declareSocket declares --control-socket, as the daemon has it.
func declareSocket(fs *cli.FlagSet, p *string) {
	fs.String(p, "control-socket", "/run/stallwatch/control.sock", "the daemon's control socket at `PATH`").Completes(cli.File)
}

func ctlStatusCommand() *cli.Command {
	var socket, format string
	return &cli.Command{
		Name:    "status",
		Summary: "the processes the daemon watches: rule, state, heartbeat age, captures",
		Usage:   "[--format text|json] [--control-socket PATH]",
		Help: `
Lists every watched process with its rule, its state (waiting, healthy,
stalled, capturing, cooldown, recovered), the age of its most silent
heartbeat, and its captures; then the host-wide counts: captures running
and in the last hour, the disk the captures use, and what each DogStatsD
tap read and what the kernel dropped.`,
		Flags: func(fs *cli.FlagSet) {
			declareFormat(fs, &format, "the status")
			declareSocket(fs, &socket)
		},
		Run: func(ctx context.Context, inv *cli.Invocation) error {
			if len(inv.Positional()) > 0 {
				return cli.UsageErrorf("status takes no arguments")
			}
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			resp, err := daemon.Dial(ctx, ctlSocket(socket, inv.Flags.Changed), daemon.Request{Op: "status"})
			if err != nil {
				return err
			}
			if format == "json" {
				enc := json.NewEncoder(termsafe.NewJSONWriter(inv.Stdout))
				enc.SetIndent("", "  ")
				return enc.Encode(resp.Status)
			}
			return writeStatus(inv, resp.Status)
		},
	}
}

// ctlSocket is the socket path: as the daemon chose it under systemd
// when not given.
func ctlSocket(p string, changed func(string) bool) string {
	if !changed("control-socket") {
		if d, _, _ := strings.Cut(os.Getenv("RUNTIME_DIRECTORY"), ":"); filepath.IsAbs(d) {
			return filepath.Join(d, "control.sock")
		}
	}
	return p
}

func writeStatus(inv *cli.Invocation, st *daemon.Status) error {
	w := termsafe.NewWriter(inv.Stdout)
	defer w.Flush()
	fmt.Fprintf(w, "stallwatch daemon %d, up %v; %d rules from %s; finding processes by %s\n",
		st.PID, time.Since(st.Since).Round(time.Second), st.Rules, st.Config, st.Discovery)
	quota := "no quota"
	if st.DiskQuota > 0 {
		quota = "quota " + humanBytes(st.DiskQuota)
	}
	fmt.Fprintf(w, "captures: %d running (at most %d at once), %d stall captures in the last hour (at most %d); %d under %s, %s of disk (%s)\n",
		st.CapturesRunning, st.MaxConcurrent, st.CapturesLastHour, st.MaxPerHour, st.DiskCaptures, st.Out, humanBytes(st.DiskUsed), quota)
	for _, tp := range st.Taps {
		fmt.Fprintf(w, "tap %s: %d datagrams, %d from watched processes, %d malformed, %d dropped by the kernel\n",
			tp.Addr, tp.Packets, tp.Attributed, tp.Malformed, tp.KernelDrops)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tRULE\tSTATE\tHEARTBEAT AGE\tSTALL\tCAPTURES\tCOMMAND")
	for _, t := range st.Targets {
		age, stall := "none yet", "-"
		if t.HeartbeatAge != nil {
			age = cli.FormatDuration(time.Duration(*t.HeartbeatAge).Round(100 * time.Millisecond))
		}
		if t.StallFor != nil {
			stall = cli.FormatDuration(time.Duration(*t.StallFor).Round(100 * time.Millisecond))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", t.PID, t.Rule, t.State, age, stall, t.Captures, t.Command)
	}
	if len(st.Targets) == 0 {
		fmt.Fprintln(tw, "(no process is watched: no rule selects a running process)")
	}
	return tw.Flush()
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func ctlCaptureCommand() *cli.Command {
	var socket string
	var pid int
	var timeout time.Duration
	return &cli.Command{
		Name:    "capture",
		Summary: "capture a watched process now and print its capture directory",
		Usage:   "-p PID [--timeout DUR] [--control-socket PATH]",
		Help: `
Asks the daemon for a capture of a process it watches, whatever the state
of its heartbeat (trigger "signal", as SIGUSR1 gives watch), waits for the
capture to be written and prints its directory. The capture waits for a
slot when max-concurrent-captures are running.`,
		Flags: func(fs *cli.FlagSet) {
			declarePID(fs, &pid, "the watched process to capture")
			fs.Duration(&timeout, "timeout", 5*time.Minute, "give up waiting after this long (the capture goes on)")
			declareSocket(fs, &socket)
		},
		Run: func(ctx context.Context, inv *cli.Invocation) error {
			if err := checkPID(pid); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			resp, err := daemon.Dial(ctx, ctlSocket(socket, inv.Flags.Changed), daemon.Request{Op: "capture", PID: pid})
			if err != nil {
				return err
			}
			w := termsafe.NewWriter(inv.Stdout)
			defer w.Flush()
			fmt.Fprintln(w, resp.Capture.Dir)
			if resp.Capture.CutShort != "" {
				fmt.Fprintf(inv.Stderr, "the capture was cut short: %s\n", resp.Capture.CutShort)
			}
			return nil
		},
	}
}
