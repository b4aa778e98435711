// Package hook runs the commands a user gives for what stallwatch sees
// (--on-capture after a capture is written, --on-recover when a stall
// ends): how people without Datadog page themselves, with a webhook
// through curl or a chat script.
//
// A hook is run by /bin/sh -c in a process group of its own, with the
// event in its environment (STALLWATCH_EVENT, STALLWATCH_CAPTURE_DIR,
// STALLWATCH_PID, STALLWATCH_PROCESS, STALLWATCH_TRIGGER,
// STALLWATCH_STALL_SECONDS, STALLWATCH_TOP_FINDING, STALLWATCH_SERVICE,
// STALLWATCH_HOST) and its standard input empty. Its output goes to the
// log line by line. It runs at most Timeout: then its whole group gets
// SIGTERM and, a moment later, SIGKILL. When the hook exits, what it left
// in its group (`sleep 300 &`) is ended the same way (a hook per capture
// would otherwise leave a process per capture, outliving stallwatch) and
// logged; a command the hook means to outlive it runs in a session of
// its own, its output elsewhere: `setsid CMD >/dev/null 2>&1 &`. Start
// never waits for a hook, so a hook that hangs never holds up the
// watchdog; at most MaxRunning run at once, and the others wait their
// turn.
package hook
