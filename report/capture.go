package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/snapshot"
)

// The files of a capture directory (the package doc, "The capture directory").
const (
	FileProfile    = "profile.pb.gz"
	FileThreads    = "threads.pb.gz"
	FileThreadJSON = "threads.json" // the snapshot in full, to render it again
	FileText       = "report.txt"
	FileHTML       = "report.html"
	FileInfo       = "capture.json"
)

// InfoSchema is the version of capture.json's layout; it grows when a
// field changes meaning, not when one is added.
const InfoSchema = 1

// Info is capture.json: the facts of one capture. doc.go describes each
// field as it appears in the file.
type Info struct {
	Schema  int    `json:"schema"`
	Version string `json:"stallwatch_version"`

	Trigger   string `json:"trigger"`             // "stall" | "signal" | "manual"
	Reason    string `json:"reason,omitempty"`    // "no heartbeat for 10.2s"
	Heartbeat string `json:"heartbeat,omitempty"` // "file /run/app.beat"
	Seq       int    `json:"seq,omitempty"`       // 2 and up: a recapture of a stall that lasts

	PID        int      `json:"pid"`
	Command    []string `json:"command,omitempty"`
	Executable string   `json:"executable,omitempty"`
	Kernel     string   `json:"kernel,omitempty"` // uname -r
	Hostname   string   `json:"hostname,omitempty"`

	Start     time.Time     `json:"start,omitzero"`            // of the sampled window, history included
	TriggerAt time.Time     `json:"trigger_at,omitzero"`       // when the capture was asked for
	End       time.Time     `json:"end,omitzero"`              // of the sampled window
	LastBeat  time.Time     `json:"last_beat,omitzero"`        // the last heartbeat before the stall
	Recovered time.Time     `json:"recovered,omitzero"`        // the first heartbeat after it
	StallFor  time.Duration `json:"stall_ns,omitempty"`        // heartbeat silence at the trigger
	StallLen  time.Duration `json:"stall_length_ns,omitempty"` // whole stall, last beat to recovery

	CutShort     bool   `json:"cut_short"`
	CutShortWhy  string `json:"cut_short_why,omitempty"`
	TargetExited bool   `json:"target_exited"`

	Counts   Counts   `json:"counts"`
	Settings Settings `json:"settings"`
	Notes    []string `json:"notes,omitempty"`
	// Files lists the capture directory's files; WriteCapture fills it.
	Files []string `json:"files"`
}

// Counts are what was collected and what was lost, never hidden.
type Counts struct {
	Samples           int    `json:"samples"`          // on-CPU samples
	OffCPU            int    `json:"offcpu_intervals"` // off-CPU intervals
	SamplesBefore     int    `json:"samples_before"`   // of Samples+OffCPU, from the flight recorder
	Lost              uint64 `json:"lost_records"`     // perf records the kernel dropped
	LostSamples       uint64 `json:"lost_samples"`
	Throttled         uint64 `json:"throttled"`
	Threads           int    `json:"threads"`
	UnreadableThreads int    `json:"unreadable_threads"`
	JITSources        int    `json:"jit_sources"`     // jitdumps and perf maps read
	JITTruncated      int    `json:"jit_truncated"`   // of them, cut off mid-record
	MissingSymbols    int    `json:"missing_symbols"` // mappings no symbol source could name
}

// Settings are the capture's parameters, so that a reader knows what the
// numbers mean.
type Settings struct {
	Freq         int           `json:"freq_hz,omitempty"`
	BaselineFreq int           `json:"baseline_freq_hz,omitempty"`
	History      time.Duration `json:"history_ns,omitempty"`
	CaptureFor   time.Duration `json:"capture_for_ns,omitempty"`
	OffCPU       bool          `json:"offcpu"`
	Kernel       bool          `json:"kernel"`
	Ptrace       bool          `json:"ptrace"`
}

// Capture is everything one capture directory holds.
type Capture struct {
	Info    Info               // → capture.json
	Profile *profile.Profile   // → profile.pb.gz; nil writes an empty, valid profile
	Threads *snapshot.Snapshot // → threads.pb.gz, threads.json; may be nil
}

// tempPrefix marks directories being written; Prune removes stale ones.
const tempPrefix = ".stallwatch-tmp-"

// WriteCapture writes c into a new directory root/<UTC time>-<pid>-<trigger>/
// and returns its path. The directory appears complete or not at all: it is
// written as a hidden directory in root, synced, and renamed into place.
func WriteCapture(root string, c *Capture) (dir string, err error) {
	if c == nil {
		return "", fmt.Errorf("report: WriteCapture: nil capture")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("report: capture root: %w", err)
	}
	tmp, err := os.MkdirTemp(root, tempPrefix)
	if err != nil {
		return "", fmt.Errorf("report: capture root: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("report: %w", err)
	}
	if err := writeCaptureFiles(tmp, c); err != nil {
		return "", err
	}
	for i := 1; ; i++ {
		dir = filepath.Join(root, CaptureDirName(&c.Info, i))
		// rename(2) replaces an empty directory, so a name that exists
		// (two captures in one millisecond) must be checked first.
		if _, err := os.Lstat(dir); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("report: %w", err)
		}
		if err := os.Rename(tmp, dir); err != nil {
			return "", fmt.Errorf("report: publish capture: %w", err)
		}
		break
	}
	if err := syncDir(root); err != nil {
		return dir, fmt.Errorf("report: %w", err)
	}
	return dir, nil
}

// writeCaptureFiles renders every file of c into dir.
func writeCaptureFiles(dir string, c *Capture) error {
	p := c.Profile
	if p == nil {
		var err error
		p, err = BuildProfile(nil, Meta{Start: c.Info.Start, Duration: c.Info.End.Sub(c.Info.Start), Comments: InfoComments(&c.Info)})
		if err != nil {
			return err
		}
	}
	cc := *c
	cc.Profile = p
	cc.Info.Schema = InfoSchema
	files := []namedWriter{{FileProfile, func(w io.Writer) error { return WriteProfile(w, p) }}}
	if c.Threads != nil {
		tp, err := BuildThreads(c.Threads)
		if err != nil {
			return err
		}
		files = append(files,
			namedWriter{FileThreads, func(w io.Writer) error { return WriteProfile(w, tp) }},
			namedWriter{FileThreadJSON, func(w io.Writer) error { return WriteThreadDumpJSON(w, c.Threads) }})
	}
	// Both reports render one view; it is built once the file list
	// (which capture.json, and so the reports, show) is known.
	var v *view
	files = append(files,
		namedWriter{FileText, func(w io.Writer) error { return writeTextView(w, v) }},
		namedWriter{FileHTML, func(w io.Writer) error { return writeHTMLView(w, v) }},
		namedWriter{FileInfo, func(w io.Writer) error { return writeInfo(w, &cc.Info) }})
	cc.Info.Files = nil
	for _, f := range files {
		cc.Info.Files = append(cc.Info.Files, f.name)
	}
	v = buildView(&cc)
	for _, f := range files {
		if err := WriteFileAtomic(filepath.Join(dir, f.name), f.write); err != nil {
			return err
		}
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// namedWriter renders one file of a capture.
type namedWriter struct {
	name  string
	write func(io.Writer) error
}

func writeInfo(w io.Writer, info *Info) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(info)
}

// CaptureDirName is the name of a capture's directory:
// "20260105T143012.345Z-4242-stall" (seq > 1 appends "-seq" to keep two
// captures of the same millisecond apart). Names sort by time.
func CaptureDirName(info *Info, seq int) string {
	t := info.TriggerAt
	if t.IsZero() {
		t = info.Start
	}
	if t.IsZero() {
		t = time.Now()
	}
	name := fmt.Sprintf("%s-%d-%s", t.UTC().Format(dirTimeLayout), info.PID, safeTrigger(info.Trigger))
	if seq > 1 {
		name += "-" + strconv.Itoa(seq)
	}
	return name
}

const dirTimeLayout = "20060102T150405.000Z"

var captureDirRx = regexp.MustCompile(`^\d{8}T\d{6}\.\d{3}Z-\d+-[a-z0-9]+(-\d+)?$`)

// IsCaptureDir says whether name is a capture directory's name.
func IsCaptureDir(name string) bool { return captureDirRx.MatchString(name) }

func safeTrigger(s string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			sb.WriteRune(r)
		}
	}
	if sb.Len() == 0 {
		return "manual"
	}
	return truncate(sb.String(), 20)
}

// ReadCapture reads a capture directory back: capture.json, profile.pb.gz,
// and the snapshot (threads.json; threads.pb.gz when that is all there is).
func ReadCapture(dir string) (*Capture, error) {
	c := &Capture{}
	info, err := readInfo(filepath.Join(dir, FileInfo))
	if err != nil {
		return nil, err
	}
	c.Info = *info
	if c.Profile, err = ReadProfile(filepath.Join(dir, FileProfile)); err != nil {
		return nil, err
	}
	jsonPath := filepath.Join(dir, FileThreadJSON)
	if f, err := os.Open(jsonPath); err == nil {
		defer f.Close()
		if c.Threads, err = ReadThreadDumpJSON(f, jsonPath); err != nil {
			return nil, err
		}
		return c, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("report: %w", err)
	}
	pbPath := filepath.Join(dir, FileThreads)
	if _, err := os.Stat(pbPath); err == nil {
		tp, err := ReadProfile(pbPath)
		if err != nil {
			return nil, err
		}
		if c.Threads, err = ThreadsFromProfile(tp); err != nil {
			return nil, fmt.Errorf("%s: %w", pbPath, err)
		}
	}
	return c, nil
}

// maxInfo bounds capture.json: it holds facts, not data.
const maxInfo = 16 << 20

func readInfo(path string) (*Info, error) {
	data, err := readBounded(path, maxInfo)
	if err != nil {
		return nil, err
	}
	var info Info
	if err := json.Unmarshal(data, &info); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("%s: offset %d: %v", path, se.Offset, err)
		}
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if info.Schema > InfoSchema {
		return nil, fmt.Errorf("%s: capture.json schema %d is newer than this stallwatch reads (%d)", path, info.Schema, InfoSchema)
	}
	return &info, nil
}

// maxProfile bounds a profile file read from disk.
const maxProfile = 1 << 30

// ReadProfile reads a pprof file (gzipped or not).
func ReadProfile(path string) (*profile.Profile, error) {
	data, err := readBounded(path, maxProfile)
	if err != nil {
		return nil, err
	}
	p, err := profile.ParseData(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not a pprof profile: %v", path, err)
	}
	return p, nil
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("report: read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than %d MiB", path, limit>>20)
	}
	return data, nil
}

// UpdateInfo changes a written capture's capture.json with f (for example
// to record that the stall recovered), then renders report.txt and
// report.html again so they say the same. Each file is replaced atomically.
// One writer per capture directory at a time.
func UpdateInfo(dir string, f func(*Info)) error {
	c, err := ReadCapture(dir)
	if err != nil {
		return err
	}
	f(&c.Info)
	c.Info.Schema = InfoSchema
	v := buildView(c)
	writes := []namedWriter{
		{FileInfo, func(w io.Writer) error { return writeInfo(w, &c.Info) }},
		{FileText, func(w io.Writer) error { return writeTextView(w, v) }},
		{FileHTML, func(w io.Writer) error { return writeHTMLView(w, v) }},
	}
	for _, wr := range writes {
		if err := WriteFileAtomic(filepath.Join(dir, wr.name), wr.write); err != nil {
			return err
		}
	}
	return nil
}

// staleTemp is how old a half-written capture directory must be before
// Prune takes it for the leftover of a crash.
const staleTemp = time.Hour

// Prune keeps the keep newest capture directories in root and removes the
// older ones (keep <= 0 keeps all). Only directories named like captures
// are touched, plus half-written ones a crash left behind over an hour ago.
func Prune(root string, keep int) error {
	entries, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("report: prune: %w", err)
	}
	var captures []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		name := e.Name()
		switch {
		case IsCaptureDir(name):
			captures = append(captures, name)
		case strings.HasPrefix(name, tempPrefix):
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleTemp {
				if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	if keep <= 0 || len(captures) <= keep {
		return errors.Join(errs...)
	}
	sort.Strings(captures) // names begin with the UTC time
	for _, name := range captures[:len(captures)-keep] {
		if err := os.RemoveAll(filepath.Join(root, name)); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("report: prune: %w", err)
	}
	return nil
}

// WriteFileAtomic writes a file through write into a temporary file beside
// path, syncs it, and renames it over path: a reader sees the old file or
// the whole new one, never a part.
func WriteFileAtomic(path string, write func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 64<<10)
	if err := write(bw); err != nil {
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("report: write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("report: sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("report: close %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// InfoComments states a capture's facts as profile comments, so that a
// profile.pb.gz read without its directory (`go tool pprof -comments`, or
// Datadog) still says what it is.
func InfoComments(info *Info) []string {
	var c []string
	add := func(format string, args ...any) { c = append(c, fmt.Sprintf(format, args...)) }
	if info.Trigger != "" {
		s := "stallwatch capture: trigger " + info.Trigger
		if !info.TriggerAt.IsZero() {
			s += " at " + info.TriggerAt.UTC().Format(time.RFC3339Nano)
		}
		if info.Reason != "" {
			s += ": " + info.Reason
		}
		c = append(c, s)
	}
	if info.PID != 0 {
		add("pid %d", info.PID)
	}
	if len(info.Command) > 0 {
		add("command: %s", strings.Join(info.Command, " "))
	}
	if info.Heartbeat != "" {
		add("heartbeat: %s", info.Heartbeat)
	}
	if info.StallFor > 0 {
		add("heartbeat silent for %s at the trigger", info.StallFor)
	}
	if info.Kernel != "" {
		add("kernel %s", info.Kernel)
	}
	n := info.Counts
	add("samples: %d on-CPU, %d off-CPU intervals (%d before the trigger); threads: %d", n.Samples, n.OffCPU, n.SamplesBefore, n.Threads)
	add("lost: %d records, %d samples; throttled %d times", n.Lost, n.LostSamples, n.Throttled)
	if info.CutShort {
		add("cut short: %s", info.CutShortWhy)
	}
	if info.TargetExited {
		add("the target exited during the capture")
	}
	for _, note := range info.Notes {
		add("note: %s", note)
	}
	if info.Version != "" {
		add("stallwatch %s", info.Version)
	}
	return c
}
