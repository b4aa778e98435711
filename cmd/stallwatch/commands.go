package main

import (
	"fmt"
	"runtime"

	"github.com/stallwatch/stallwatch/internal/cli"
	"github.com/stallwatch/stallwatch/internal/version"
)

// newApp is the command table: every command, in the order help lists
// them. Help, the man page and the shell completion scripts are all made
// from it. g receives the flags every command takes.
func newApp(g *globals) *cli.App {
	app := &cli.App{
		Name:    "stallwatch",
		Summary: "a watchdog profiler for Linux processes that freeze",
		Help:    appHelp,
		Footer:  appFooter,
		Version: func() string {
			return fmt.Sprintf("%s (%s, %s/%s)", version.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		},
		Global:   g.declare,
		Sections: manSections,
	}
	app.Commands = []*cli.Command{
		watchCommand(g),
		recordCommand(g),
		snapshotCommand(g),
		reportCommand(g),
		uploadCommand(g),
		jitCommand(g),
		daemonCommand(g),
		ctlCommand(g),
		app.CompletionCommand(),
		app.ManCommand(),
		app.HelpCommand(),
		app.VersionCommand(),
	}
	return app
}

const appHelp = `
stallwatch watches a process's heartbeat and, when it stalls, captures what
every thread is doing: on-CPU and off-CPU stacks with kernel and JIT frames,
a snapshot of every thread and the lock it waits for, as a report and pprof
profiles.`

const appFooter = `
Exit codes: 0 done, 1 failure, 2 bad usage or configuration, 3 not
permitted (the message names every missing capability or setting and the
command that grants them), 4 the process watch --pid watched exited.
watch -- CMD exits with CMD's status, or as a shell does when CMD cannot
run: 127 not found, 126 not executable.`

// manSections are the man page's sections beyond the commands.
var manSections = [][2]string{
	{"EXIT STATUS", `
0  done.
1  failure: the target does not exist, a file could not be written, a capture failed.
2  bad usage: an unknown flag, a missing argument, a setting out of range; for the daemon, a configuration file that cannot be used.
3  not permitted: the message names every missing capability or kernel setting and the command that grants them.
4  the process watch --pid watched exited (not 0, so that a systemd unit with Restart=on-failure starts stallwatch again).
watch -- CMD exits with the status of CMD, 128+N when signal N killed it. The daemon exits 0 when stopped by SIGTERM or SIGINT.`},
	{"SIGNALS", `
SIGUSR1 makes watch capture now, whatever the state of the heartbeat; the daemon captures every process it watches.
SIGHUP makes the daemon read its configuration again (a configuration that cannot be used is refused with its file, line and reason, and the rules in force go on); watch passes it on to CMD, or with --pid logs it and goes on.
SIGINT and SIGTERM end every command cleanly: a recording or a capture in progress is cut short and still written; watch -- CMD passes them on to CMD.`},
	{"ENVIRONMENT", `
DD_DOGSTATSD_URL, DD_AGENT_HOST, DD_DOGSTATSD_PORT
    where watch sends alerts when --statsd is not given, and where watch --heartbeat-statsd forwards the target's metrics when --forward is not given.
DD_TRACE_AGENT_URL, DD_AGENT_HOST, DD_TRACE_AGENT_PORT
    where watch, record and upload send captures when --upload is not given.
DD_SERVICE, DD_ENV, DD_VERSION, DD_TAGS
    the service, env, version and other tags of alerts and uploads when --service, --env and --tags are not given.`},
	{"FILES", `
./stallwatch-captures
    the default --out: one capture directory per capture, named TIME-PID-TRIGGER, holding profile.pb.gz, threads.pb.gz, report.txt, report.html and capture.json. Under systemd ($STATE_DIRECTORY set) or when run from /, $STATE_DIRECTORY/captures, else /var/lib/stallwatch/captures.
./stallwatch-captures/.upload-queue
    uploads the agent has not taken yet, one file each; they survive restarts, and watch or record with uploads on sends them.
/var/run/datadog/dsd.socket, /var/run/datadog/apm.socket
    the Datadog agent's sockets, used for alerts and uploads when they exist and nothing else is configured.
/etc/stallwatch/stallwatch.yaml
    the daemon's configuration (--config).
/var/lib/stallwatch
    the daemon's state directory ($STATE_DIRECTORY under systemd): captures/ and state.json.
/run/stallwatch/control.sock
    the daemon's control socket ($RUNTIME_DIRECTORY/control.sock under systemd), for stallwatch ctl.
/tmp/perf-PID.map, jit-PID.dump
    the JIT symbol files runtimes write, read for the names of JIT-compiled code.`},
	{"SEE ALSO", `
perf(1), go tool pprof, https://github.com/google/pprof`},
}
