// Command beater is a target for the watchdog's tests and benchmarks: it
// beats a heartbeat (a file it replaces atomically, a DogStatsD metric sent
// with the Datadog client, an HTTP endpoint that answers 200) and stops
// beating on command or after a delay, the way a service whose metrics
// exporter starves does.
//
// It prints "ready" when every heartbeat is set up, "stopped LAST" when it
// stops (LAST: CLOCK_MONOTONIC ns of its last beat, taken just before the
// beat), and "resumed" when it beats again. Commands on stdin, one a line:
// "stop", "resume", "exit N". While stopped, the HTTP endpoint hangs like a
// frozen server.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/DataDog/datadog-go/v5/statsd"

	"github.com/stallwatch/stallwatch/internal/monotime"
)

type beater struct {
	file     string
	metric   string
	requests bool
	client   *statsd.Client
	mu       sync.Mutex
	stopped  bool
	resumed  chan struct{} // closed when beats resume
	lastBeat uint64
	count    int
}

func main() {
	file := flag.String("file", "", "heartbeat `PATH`, replaced atomically at each beat")
	statsdAddr := flag.String("statsd", "", "DogStatsD `ADDR` (host:port or unix:///path); \"env\" uses DD_DOGSTATSD_URL / DD_AGENT_HOST")
	metric := flag.String("metric", "app.heartbeat", "heartbeat metric `NAME`")
	httpAddr := flag.String("http", "", "serve GET /health on `ADDR` (prints \"http ADDR\" with the port chosen)")
	interval := flag.Duration("interval", 100*time.Millisecond, "time between beats")
	stopAfter := flag.Duration("stop-after", 0, "stop beating after this delay (0: only on command)")
	resumeAfter := flag.Duration("resume-after", 0, "resume beating this long after stopping (0: only on command)")
	exitAfter := flag.Duration("exit-after", 0, "exit after this delay with -exit-code")
	exitCode := flag.Int("exit-code", 0, "exit status for -exit-after")
	termCode := flag.Int("term-code", -1, "on SIGINT/SIGTERM print the signal and exit with this status (-1: die by the signal)")
	termIgnore := flag.Int("term-ignore", 0, "with -term-code: ignore the first `N` SIGINT/SIGTERM (printing \"ignored SIGNAL\")")
	spin := flag.Bool("spin", false, "burn CPU in a goroutine while beating")
	requests := flag.Bool("requests", true, "with -statsd: also count app.requests at each beat (a service's other metrics)")
	threads := flag.Int("threads", 0, "run `N` more OS threads, each busy half the time (a service's workers)")
	flag.Parse()

	b := &beater{file: *file, metric: *metric, requests: *requests, resumed: make(chan struct{})}
	if *statsdAddr != "" {
		addr := *statsdAddr
		if addr == "env" {
			addr = ""
		}
		c, err := statsd.New(addr, statsd.WithoutClientSideAggregation(), statsd.WithBufferFlushInterval(10*time.Millisecond))
		if err != nil {
			fatal("statsd: %v", err)
		}
		b.client = c
	}
	if *httpAddr != "" {
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			fatal("http: %v", err)
		}
		fmt.Printf("http %s\n", ln.Addr())
		go http.Serve(ln, http.HandlerFunc(b.health))
	}
	if *termCode >= 0 {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			for i := 0; ; i++ {
				s := <-sigs
				if i < *termIgnore {
					fmt.Printf("ignored %s\n", s)
					continue
				}
				fmt.Printf("signal %s\n", s)
				os.Exit(*termCode)
			}
		}()
	}
	if *exitAfter > 0 {
		time.AfterFunc(*exitAfter, func() { b.exit(*exitCode) })
	}
	if *stopAfter > 0 {
		time.AfterFunc(*stopAfter, func() {
			b.stop()
			if *resumeAfter > 0 {
				time.AfterFunc(*resumeAfter, b.resume)
			}
		})
	}
	if *spin {
		go spinWhileBeating(b)
	}
	for range *threads {
		go worker()
	}
	go b.commands()
	b.beat()
	fmt.Println("ready")
	for range time.Tick(*interval) {
		b.beat()
	}
}

func (b *beater) isStopped() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stopped
}

func (b *beater) beat() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	b.count++
	// Stamped before the beat: latencies measured from it can only be
	// overstated.
	b.lastBeat = monotime.Now()
	if b.file != "" {
		tmp := b.file + ".tmp"
		if err := os.WriteFile(tmp, []byte(strconv.Itoa(b.count)+"\n"), 0o644); err != nil {
			fatal("%v", err)
		}
		if err := os.Rename(tmp, b.file); err != nil {
			fatal("%v", err)
		}
	}
	if b.client != nil {
		b.client.Gauge(b.metric, float64(b.count), []string{"beater:yes"}, 1)
		if b.requests {
			b.client.Incr("app.requests", nil, 1)
		}
	}
}

func (b *beater) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return
	}
	b.stopped = true
	b.resumed = make(chan struct{})
	if b.client != nil {
		b.client.Flush()
	}
	fmt.Printf("stopped %d\n", b.lastBeat)
}

func (b *beater) resume() {
	b.mu.Lock()
	if !b.stopped {
		b.mu.Unlock()
		return
	}
	b.stopped = false
	close(b.resumed)
	b.mu.Unlock()
	b.beat()
	fmt.Println("resumed")
}

func (b *beater) exit(code int) {
	if b.client != nil {
		b.client.Close()
	}
	os.Exit(code)
}

// health answers 200 while beating; while stopped it hangs until beats
// resume or the client gives up, like a server whose threads are stuck.
func (b *beater) health(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	stopped, resumed := b.stopped, b.resumed
	b.mu.Unlock()
	if stopped {
		select {
		case <-resumed:
		case <-r.Context().Done():
			return
		}
	}
	w.WriteHeader(http.StatusOK)
	fmt.Fprintln(w, "ok")
}

func (b *beater) commands() {
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "stop":
			b.stop()
		case "resume":
			b.resume()
		case "exit":
			code := 0
			if len(f) > 1 {
				code, _ = strconv.Atoi(f[1])
			}
			b.exit(code)
		}
	}
}

// sink keeps the spinning loop's work from being optimised away.
var sink atomic.Int64

func spinWhileBeating(b *beater) {
	for {
		if b.isStopped() {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		x := 0
		for i := 0; i < 1_000_000; i++ {
			x += i
		}
		sink.Add(int64(x))
	}
}

// worker keeps a thread busy half of every 10 ms. It sleeps in a raw
// nanosleep(2) rather than time.Sleep: a goroutine blocked in a system call
// keeps its OS thread, so the workers are threads of their own, the way a
// service's are. (Locking each to its thread with runtime.LockOSThread
// instead starves the unlocked main goroutine, and the heartbeat with it:
// the Ps keep moving between the locked threads.)
func worker() {
	nap := syscall.Timespec{Nsec: 5e6}
	for {
		start := time.Now()
		x := 0
		for time.Since(start) < 5*time.Millisecond {
			for i := 0; i < 10_000; i++ {
				x += i
			}
		}
		sink.Add(int64(x))
		syscall.Nanosleep(&nap, nil)
	}
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "beater: "+format+"\n", args...)
	os.Exit(1)
}
