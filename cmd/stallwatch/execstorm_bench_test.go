package main

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// BenchmarkExecStorm: user nobody runs /bin/true with 1 MiB of arguments
// about 100 times a second for 10 s, beside a daemon whose rule selects by
// command line ('^myapp-server'). It reports the daemon's CPU over the
// storm as a share of one core (the daemon reads every exec's command
// line), the execs achieved, the daemon's CPU over as long without the
// storm, and the overflow the daemon counted.
func BenchmarkExecStorm(b *testing.B) {
	testutil.RequireRoot(b)
	uid, gid := testutil.Nobody(b)
	config := `
out: OUT
rules:
  - name: myapp
    match: {cmdline: '^myapp-server-` + marker() + `'}
    heartbeat-proc: true
`
	arg := strings.Repeat("x", 128<<10-1) // MAX_ARG_STRLEN is 128 KiB
	args := make([]string, 8)             // 1 MiB
	for i := range args {
		args[i] = arg
	}
	const window = 10 * time.Second
	for i := 0; i < b.N; i++ {
		e := newDaemonEnv(b, config)
		e.start(b)
		cpu := func() time.Duration { d, _ := testutil.CPUTime(e.sw.Pid); return d }
		quiet0 := cpu()
		time.Sleep(window) // the measurement window, not synchronization
		quiet := cpu() - quiet0

		storm0, execs := cpu(), 0
		tick := time.NewTicker(10 * time.Millisecond)
		end := time.Now().Add(window)
		for time.Now().Before(end) {
			<-tick.C
			c := exec.Command("/bin/true", args...)
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
			if err := c.Run(); err != nil {
				b.Fatal(err)
			}
			execs++
		}
		tick.Stop()
		storm := cpu() - storm0
		b.ReportMetric(float64(execs)/window.Seconds(), "execs/s")
		b.ReportMetric(float64(storm)/float64(window)*100, "%core-storm")
		b.ReportMetric(float64(quiet)/float64(window)*100, "%core-quiet")
		b.Logf("daemon CPU: %.2f%% of a core during %d execs of 1 MiB of arguments in %v, %.2f%% without; log lines about the storm: %d",
			float64(storm)/float64(window)*100, execs, window, float64(quiet)/float64(window)*100, strings.Count(e.sw.Stderr(), "exec events"))
		stopDaemon(b, e)
	}
}
