// Package daemon is `stallwatch daemon`: one process per host that
// watches every process its rules select, each the way `stallwatch
// watch` watches one (package watch: its heartbeats, capture session and
// watchdog), within the host's limits.
//
// # Configuration
//
// A YAML file (ReadFile, Parse): host-wide settings at the top, rule
// settings every rule starts from under "defaults:", and the rules. A rule
// has a name, a "match:" that selects processes, and settings with the
// names of `stallwatch watch`'s flags:
//
//	out: /var/lib/stallwatch/captures
//	disk-quota: 2GiB
//	max-concurrent-captures: 2
//	max-captures-per-hour: 20
//	defaults:
//	  stall-after: 30s
//	rules:
//	  - name: julia
//	    match:
//	      cmdline: 'julia .*server\.jl'
//	      user: app
//	    heartbeat-tap: udp://:8125
//	    metric: myapp.exporter.*
//
// This package reads the file's structure and the selectors, and keeps
// every setting's name and line (File, Setting); what a setting means is
// the command's, which declares the flags (Config and Rule are the
// settings resolved). Errors name the file and the line (ConfigError).
//
// Selectors (match:, every one given must match): cmdline and exe
// (regular expressions, unanchored), pidfile (read when it is written —
// inotify on its directory, pidfiles.go — and at every scan), cgroup
// (a regular expression on the cgroup path), container (a container id or
// its beginning) and pod (a Kubernetes pod UID), both found in the cgroup
// path (package procwatch), and user (name or number, the effective uid).
//
// A cmdline pattern never selects a wrapper — timeout, sudo, env, nohup,
// setsid, xargs, sh -c and the like (WrapperOf) — whose arguments hold
// the command line it matches: the program the wrapper runs is selected
// by its own command line, as the wrapper's child or as the same process
// once the wrapper executes it, and a capture of the wrapper would show
// only its wait. An exe pattern naming the wrapper selects it. SelectNow
// says what each rule selects at this moment (daemon --check), and which
// selected processes are wrappers.
//
// # Finding processes
//
// The kernel's process connector announces each exec at once where
// stallwatch may listen (root in the host's namespaces), and each process
// a watched one forks (a prefork server's workers, which execute nothing;
// those forked before it was watched are read from its children); a scan of /proc
// every scan-interval finds processes otherwise, and backs the connector
// up every ten scan intervals. A process is watched by the first rule
// that selects it; one no rule selects is looked at again at every scan
// for its first minute (it may execute another program) and every 30 s
// after; when every rule selects by command line, a process whose command
// line matches none is ruled out from its stat and cmdline alone (the
// daemon looks at every exec of the host). Of a command line, no more is
// read than the patterns need: a pattern anchored at the start with no
// unbounded repetition ('^myapp-server') its longest match, any other the
// first 128 KiB (the longest argument the kernel takes), and 4 KiB at
// least, to show. The work exec events make is bounded too: at most
// 2,000 processes and 4 MiB of command lines read a second (the bytes
// read, not the patterns' need); what is over is left to the next scan,
// counted (status: execs_over_budget) and logged once a minute. Exec
// events are read in batches, every 100 ms while they come: a process is
// watched within 100 ms of its exec. A process that exits is
// dropped when its watchdog sees it go (its pidfd), and everything held
// on it is closed.
//
// # Costs while idle
//
// An idle daemon's CPU is its wake-ups more than its work: on a loaded
// host each wake-up of a thread of an idle Go process costs tens of
// microseconds (the switch in, the scheduler's search for work, a second
// thread started to spin, the runtime's monitor thread, sysmon), more
// than reading a batch of events. So its periodic work falls on one grid
// of CLOCK_MONOTONIC, where one wake-up serves it all: every target's
// process-progress heartbeat is read by one watchdog.Poller (a wake-up a
// second for all of them, on whole seconds, one raw system call per
// target), the targets' watchdogs sleep while their heartbeats are
// healthy and wake at their deadlines rounded up to 100 ms, and the
// kernel's exec events are read every 100 ms, on the same instants,
// while they come. The tap's datagrams arrive in a ring read a block at a
// time (the kernel hands a block over every 100 ms while they come).
//
// The host's execs cost the daemon next to nothing while it is idle: the
// process connector's socket is in no epoll set while events come (the
// kernel would wake a reader at every datagram, a fork and an exec a
// process), its datagrams are read 64 to a system call, an exec whose
// process exited within its batch (most of a host's: a shell's commands)
// is dropped unread, and the others' command lines are read, one file
// each, into a buffer kept for it, matched in place, nothing allocated
// (a buffer of the patterns' need a process, 128 KiB under an unanchored
// pattern, kept the garbage collector busy at 200 execs a second). The
// system calls that never block (the pidfds' ppoll, CLOCK_BOOTTIME, the
// exec events' recvmmsg) are raw: each the runtime
// accounts as one that may block woke sysmon from its sleep.
//
// BenchmarkDaemon (200 progress and 50 tap targets, the tap's 500
// datagrams a second, the host forking 50 processes a second and more):
// 0.6% of a core at 68-78 forks/s (the median of three runs, 0.53-0.67%,
// load 38-69 of 2 cores), where the daemon before these measures used
// 1.27% (1.03-1.37%) in runs beside them; RSS 29 MB. What it spends
// (perf, 30 s): the tap's
// datagrams a quarter (a sender lookup each, a system call; the senders
// are now read in place from a BPF ring buffer: 0.47% at 50 forks/s
// where the lookups cost 0.60%, medians of three runs alternated), wake-ups
// and sysmon two fifths, exec events a fifth, the progress readings 7%,
// the watchdogs 3%, the garbage collector 2%.
//
// # Captures
//
// Each target has the per-process policy of `watch` (stall-after,
// recapture-after, max-captures an hour) and the host has its own bounds:
// max-concurrent-captures at once (a capture waits for a slot),
// max-captures-per-hour stall captures written across every target (kept
// across restarts in the state directory, each with its rule and user) —
// of which, while several users' processes are watched, no user's take
// more than half, nor, while several rules are in force, any rule's (a
// rule that selects by command line selects what anyone can start: their
// processes cannot spend the captures of another user's) — and a disk
// quota: after each capture
// the oldest captures are removed until the rest fit, and while they do
// not, captures are refused (the daemon's watch.Gate). A target's
// capture session (symbol tables, the flight recorder, the continuous
// profile) follows package watch's one policy: with a flight recorder or
// a continuous profile it opens when the target is first watched;
// without, at its first capture, and it closes after SessionIdle, so that
// an idle daemon watching hundreds of processes holds little.
//
// # Alerts, uploads and hooks
//
// What each target's watchdog sees goes to Options.Events (package
// notify: one DogStatsD client, one upload queue and one hook runner for
// every target), told the rule's service, tags and hook commands
// (Notify); Options.Uploads spares a capture whose upload is pending from
// keep, as in `watch`.
//
// # Control
//
// Reload puts a new configuration in force (SIGHUP: the command reads and
// checks it first, and a bad one never gets here); targets whose rule is
// unchanged keep their state. A target whose rule changed (or that no
// rule selects now, or that exited) is stopped off the daemon's loop: its
// capture in progress is cut short and written (its session is closed
// only after, within a minute), and then it is watched under its new
// rule — exec events, control requests and systemd's pings never wait
// for a capture. CaptureAll captures every target (SIGUSR1).
// The control socket (a unix socket in a directory only the daemon's user
// may enter; connections from root and that user only) answers "status"
// and "capture" requests, one JSON line each way (Dial).
package daemon
