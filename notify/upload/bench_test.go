package upload

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/intaketest"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

// bigCapture writes a capture whose profile.pb.gz is about size bytes:
// samples with random frame names, which gzip cannot shrink much, as a
// JIT-heavy target's are.
func bigCapture(b *testing.B, size int) string {
	b.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	p := &profile.Profile{SampleType: []*profile.ValueType{{Type: "cpu-samples", Unit: "count"}}}
	name := func() string {
		const abc = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"
		buf := make([]byte, 24)
		for i := range buf {
			buf[i] = abc[r.IntN(len(abc))]
		}
		return string(buf)
	}
	// ~30 bytes of entropy per function after gzip.
	n := size / 30
	for i := 0; i < n; i++ {
		fn := &profile.Function{ID: uint64(i + 1), Name: name()}
		loc := &profile.Location{ID: uint64(i + 1), Address: uint64(i) * 16, Line: []profile.Line{{Function: fn}}}
		p.Function = append(p.Function, fn)
		p.Location = append(p.Location, loc)
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{loc}, Value: []int64{int64(r.IntN(100) + 1)}})
	}
	now := time.Now()
	return intaketest.WriteCapture(b, b.TempDir(), model.Info{Trigger: model.Stall, PID: 1, Start: now.Add(-10 * time.Second), End: now}, p, nil)
}

// drain is an agent that reads every request to the end and answers 200.
func drain(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	})}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// BenchmarkUpload5MB uploads a capture whose profile is 5 MB over
// loopback — Load (reading the directory) and Upload (building the form
// and posting it) — beside curl posting the same files as the same form.
// Reports MB/s and the ratio to curl's time (lower is better).
func BenchmarkUpload5MB(b *testing.B) {
	curl := testutil.RequireTool(b, "curl")
	dir := bigCapture(b, 5<<20)
	st, err := os.Stat(filepath.Join(dir, capdir.FileProfile))
	if err != nil {
		b.Fatal(err)
	}
	url := drain(b)
	u, err := New(Config{URL: url, Tags: []string{"service:bench"}})
	if err != nil {
		b.Fatal(err)
	}
	p, err := Load(dir)
	if err != nil {
		b.Fatal(err)
	}
	body, _, err := u.body(p)
	if err != nil {
		b.Fatal(err)
	}
	var ev event
	if err := json.Unmarshal(extractEvent(b, body), &ev); err != nil {
		b.Fatal(err)
	}
	evFile := filepath.Join(b.TempDir(), "event.json")
	evJSON, _ := json.Marshal(ev)
	if err := os.WriteFile(evFile, evJSON, 0o644); err != nil {
		b.Fatal(err)
	}

	var ours, theirs []time.Duration
	for b.Loop() {
		start := time.Now()
		p, err := Load(dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := u.Upload(context.Background(), p); err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))

		start = time.Now()
		cmd := exec.Command(curl, "-sS", "-o", "/dev/null", "--fail",
			"-H", "DD-EVP-ORIGIN: curl",
			"-F", "event=@"+evFile+";type=application/json;filename=event.json",
			"-F", "profile.pprof=@"+filepath.Join(dir, capdir.FileProfile)+";filename=profile.pprof",
			url+Path)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("curl: %v: %s", err, out)
		}
		theirs = append(theirs, time.Since(start))
	}
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	mo, mt := med(ours), med(theirs)
	b.ReportMetric(float64(mo)/1e6, "ms/upload")
	b.ReportMetric(float64(st.Size())/1e6/mo.Seconds(), "MB/s")
	b.ReportMetric(float64(mt)/1e6, "curl-ms")
	b.ReportMetric(float64(mo)/float64(mt), "x-curl")
	b.ReportMetric(0, "ns/op")
	b.Logf("profile.pb.gz %s: stallwatch %v, curl %v (medians of %d)", fmt.Sprint(st.Size()), mo, mt, len(ours))
}

// extractEvent returns the event part of a form body we built.
func extractEvent(b *testing.B, body []byte) []byte {
	start := slices.Index(body, '{')
	depth := 0
	for i := start; i < len(body); i++ {
		switch body[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return body[start : i+1]
			}
		}
	}
	b.Fatal("no event in the body")
	return nil
}
