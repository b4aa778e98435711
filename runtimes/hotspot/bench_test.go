package hotspot

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/testutil"
)

// safepointTotal matches the VM's own account of a safepoint
// (-Xlog:safepoint): how long every Java thread was stopped for it.
var safepointTotal = regexp.MustCompile(`Safepoint "(\w+)".* Total: (\d+) ns`)

// BenchmarkThreads200 reads the Java threads of a 200-thread JVM from its
// memory, beside jstack -l on the same JVM: wall time per reading, and how
// long the JVM's threads were stopped for it (jstack's dump is a
// safepoint the VM logs; the memory is read without stopping any thread).
func BenchmarkThreads200(b *testing.B) {
	testutil.RequirePtrace(b)
	tg := startStall(b, []string{"-Xlog:safepoint"}, "threads", "200")
	log := collect(tg)
	var memWall, jstackWall time.Duration
	b.Run("memory", func(b *testing.B) {
		mem, syms := openLive(b, tg.Pid)
		l, err := ReadLayout(NewReader(mem, Limits{}), syms) // once per target, as a session does
		if err != nil {
			b.Fatal(err)
		}
		var spent int64
		for b.Loop() {
			r := NewReader(mem, Limits{})
			vm, err := NewVM(r, syms, l)
			if err != nil {
				b.Fatal(err)
			}
			j, err := vm.ReadJava(nil)
			if err != nil || len(j.Threads) < 200 {
				b.Fatalf("%v, %d threads", err, len(j.Threads))
			}
			spent = r.Spent()
		}
		memWall = b.Elapsed() / time.Duration(b.N)
		b.ReportMetric(float64(spent), "bytes-read/op")
		b.ReportMetric(0, "stopped-ms/op")
	})
	b.Run("jstack", func(b *testing.B) {
		// Safepoints logged before this run are not jstack's.
		log.take()
		for b.Loop() {
			if _, ok := jstack(b, tg.Pid, time.Minute); !ok {
				b.Fatal("jstack did not answer")
			}
		}
		jstackWall = b.Elapsed() / time.Duration(b.N)
		var stopped time.Duration
		n := 0
		// The VM logs each dump's safepoint once it ends.
		err := testutil.Eventually(10*time.Second, func() bool {
			for _, l := range log.take() {
				if m := safepointTotal.FindStringSubmatch(l); m != nil && m[1] == "PrintThreads" {
					ns, _ := strconv.ParseInt(m[2], 10, 64)
					stopped += time.Duration(ns)
					n++
				}
			}
			return n >= b.N
		})
		if err != nil {
			b.Fatalf("the VM logged %d of jstack's %d safepoints", n, b.N)
		}
		b.ReportMetric(float64(stopped.Microseconds())/1000/float64(n), "stopped-ms/op")
	})
	if memWall > 0 && jstackWall > 0 {
		fmt.Printf("200 Java threads: memory %v per reading, jstack -l %v: %.0f× faster\n",
			memWall.Round(10*time.Microsecond), jstackWall.Round(time.Millisecond), float64(jstackWall)/float64(memWall))
	}
}

// lines are what a target prints, collected as it prints them.
type lines struct {
	mu sync.Mutex
	l  []string
}

func collect(tg *testutil.Target) *lines {
	ls := &lines{}
	go func() {
		for {
			l, err := tg.Stdout.ReadString('\n')
			ls.mu.Lock()
			ls.l = append(ls.l, strings.TrimSpace(l))
			ls.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return ls
}

// take returns the lines collected since the last take.
func (ls *lines) take() []string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := ls.l
	ls.l = nil
	return out
}
