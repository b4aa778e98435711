package capdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/internal/testutil"
	"github.com/stallwatch/stallwatch/model"
)

var at = time.Date(2026, 1, 5, 14, 30, 12, 345e6, time.UTC)

func openRoot(t *testing.T, path string) *Root {
	t.Helper()
	r, err := OpenRoot(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// text is a File whose content is s.
func text(name, s string) File {
	return File{Name: name, Write: func(w io.Writer) error { _, err := io.WriteString(w, s); return err }}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestWrite(t *testing.T) {
	root := t.TempDir()
	r := openRoot(t, root)
	info := NewInfo(model.Target{PID: 4242, Command: []string{"app"}}, model.Trigger{Kind: model.Stall, At: at, Reason: "no heartbeat for 10.2s", StallFor: 10200 * time.Millisecond})
	info.Findings = []model.Finding{{Kind: model.FindingDeadlock, Severity: model.SeverityCritical, Summary: "DEADLOCK: 1 waits for 2 waits for 1.", TIDs: []int{1, 2}}}
	// A rendering sees the file list (reports show it).
	var seenFiles []string
	files := []File{
		text(FileProfile, "profile"),
		{Name: FileText, Write: func(w io.Writer) error {
			seenFiles = slices.Clone(info.Files)
			_, err := io.WriteString(w, "report")
			return err
		}},
	}
	dir, err := r.Write(&info, files)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := filepath.Base(dir), "20260105T143012.345Z-4242-stall"; got != want {
		t.Errorf("directory %s, want %s", got, want)
	}
	if got := names(t, root); !reflect.DeepEqual(got, []string{filepath.Base(dir)}) {
		t.Errorf("root holds %v, want only the capture", got)
	}
	want := []string{FileInfo, FileProfile, FileText}
	if got := names(t, dir); !reflect.DeepEqual(got, want) {
		t.Errorf("files %v, want %v (and no temporaries)", got, want)
	}
	if want := []string{FileProfile, FileText, FileInfo}; !reflect.DeepEqual(seenFiles, want) || !reflect.DeepEqual(info.Files, want) {
		t.Errorf("files listed while rendering %v, after %v; want %v", seenFiles, info.Files, want)
	}
	for _, name := range []string{"", FileProfile} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != 0o755 && name == "" || st.Mode().Perm() != 0o644 && name != "" {
			t.Errorf("%s: mode %v (%v), want 0755 for the directory, 0644 for files", name, st.Mode(), err)
		}
	}

	var raw map[string]any
	data, err := os.ReadFile(filepath.Join(dir, FileInfo))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	for k, v := range map[string]any{
		"schema": 1.0, "trigger": "stall", "pid": 4242.0, "stall_ns": 10.2e9, "hostname": host,
		"trigger_at": "2026-01-05T14:30:12.345Z", "cut_short": false, "target_exited": false,
	} {
		if raw[k] != v {
			t.Errorf("capture.json %s = %v, want %v", k, raw[k], v)
		}
	}
	if k, _ := raw["kernel"].(string); k == "" {
		t.Error("capture.json has no kernel release")
	}
	fs, _ := raw["findings"].([]any)
	if len(fs) != 1 || !reflect.DeepEqual(fs[0], map[string]any{"kind": "deadlock", "severity": "critical", "summary": "DEADLOCK: 1 waits for 2 waits for 1.", "tids": []any{1.0, 2.0}}) {
		t.Errorf("capture.json findings %v", raw["findings"])
	}

	back, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if !reflect.DeepEqual(back.Info, info) {
		t.Errorf("read back:\n%+v\nwant\n%+v", back.Info, info)
	}
	if b, err := back.ReadFile(FileProfile, 100); err != nil || string(b) != "profile" {
		t.Errorf("ReadFile: %q, %v", b, err)
	}
	if !back.Has(FileText) || back.Has(FileThreads) {
		t.Error("Has disagrees with the files")
	}
}

// TestWriteFailedFile: a file that cannot be rendered is left out and said;
// the capture is still written.
func TestWriteFailedFile(t *testing.T) {
	r := openRoot(t, t.TempDir())
	info := NewInfo(model.Target{PID: 7}, model.Trigger{Kind: model.Signal, At: at})
	dir, err := r.Write(&info, []File{
		text(FileProfile, "profile"),
		{Name: FileHTML, Write: func(io.Writer) error { return errors.New("template broke") }},
		text(FileText, "report"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(t, dir), []string{FileInfo, FileProfile, FileText}; !reflect.DeepEqual(got, want) {
		t.Errorf("files %v, want %v", got, want)
	}
	back, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if slices.Contains(back.Info.Files, FileHTML) || len(back.Info.Notes) != 1 || !strings.Contains(back.Info.Notes[0], "report.html is missing: ") || !strings.Contains(back.Info.Notes[0], "template broke") {
		t.Errorf("capture.json files %v, notes %q", back.Info.Files, back.Info.Notes)
	}
}

func TestWriteSameMillisecond(t *testing.T) {
	r := openRoot(t, t.TempDir())
	info := NewInfo(model.Target{PID: 12}, model.Trigger{Kind: model.Stall, At: at})
	var dirs []string
	for range 3 {
		d, err := r.Write(&info, []File{text(FileProfile, "p")})
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, filepath.Base(d))
	}
	want := []string{"20260105T143012.345Z-12-stall", "20260105T143012.345Z-12-stall-2", "20260105T143012.345Z-12-stall-3"}
	if !reflect.DeepEqual(dirs, want) {
		t.Errorf("captures of one millisecond: %v, want %v", dirs, want)
	}
	// An empty directory of the same name is not replaced (rename(2)
	// would replace it silently).
	if err := os.Mkdir(filepath.Join(r.Path(), "20260105T143012.345Z-12-signal"), 0o755); err != nil {
		t.Fatal(err)
	}
	info.Trigger = model.Signal
	d, err := r.Write(&info, nil)
	if err != nil || filepath.Base(d) != "20260105T143012.345Z-12-signal-2" {
		t.Errorf("beside an empty directory of its name: %s, %v", d, err)
	}
}

// TestWriteAtomic watches the root while captures are written: a capture
// directory that is visible at all is complete.
func TestWriteAtomic(t *testing.T) {
	root := t.TempDir()
	r := openRoot(t, root)
	big := strings.Repeat("x", 1<<20)
	files := []File{text(FileProfile, big), text(FileText, big), text(FileHTML, big)}
	var stop atomic.Bool
	var seen atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			entries, _ := os.ReadDir(root)
			for _, e := range entries {
				if !IsDirName(e.Name()) {
					continue
				}
				seen.Add(1)
				for _, f := range []string{FileInfo, FileProfile, FileText, FileHTML} {
					if st, err := os.Stat(filepath.Join(root, e.Name(), f)); err != nil || st.Size() == 0 {
						t.Errorf("visible capture %s lacks %s: %v", e.Name(), f, err)
						return
					}
				}
				d, err := Open(filepath.Join(root, e.Name()))
				if err != nil {
					t.Errorf("visible capture %s: %v", e.Name(), err)
					return
				}
				d.Close()
			}
		}
	})
	info := NewInfo(model.Target{PID: 3}, model.Trigger{Kind: model.Stall, At: at})
	for range 20 {
		info.TriggerAt = info.TriggerAt.Add(time.Second)
		if _, err := r.Write(&info, files); err != nil {
			t.Fatal(err)
		}
	}
	// The watcher must look at least once after the last write.
	if err := testutil.Eventually(10*time.Second, func() bool { return seen.Load() > 0 }); err != nil {
		t.Error("the watcher never saw a capture")
	}
	stop.Store(true)
	wg.Wait()
}

func TestUpdate(t *testing.T) {
	r := openRoot(t, t.TempDir())
	info := NewInfo(model.Target{PID: 4242}, model.Trigger{Kind: model.Stall, At: at, LastBeat: at.Add(-10 * time.Second), Reason: "no heartbeat for 10s"})
	dir, err := r.Write(&info, []File{text(FileProfile, "p"), text(FileText, "not recovered")})
	if err != nil {
		t.Fatal(err)
	}
	recovered := at.Add(32 * time.Second)
	err = r.Update(filepath.Base(dir), func(in *model.Info) {
		in.Recovered = recovered
		in.StallLen = recovered.Sub(in.LastBeat)
	}, func(d *Dir) ([]File, error) {
		p, err := d.ReadFile(FileProfile, 10)
		if err != nil {
			return nil, err
		}
		return []File{text(FileText, fmt.Sprintf("recovered after %v (profile %q)", d.Info.StallLen, p))}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	back, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if !back.Info.Recovered.Equal(recovered) || back.Info.StallLen != 42*time.Second || back.Info.Reason != "no heartbeat for 10s" {
		t.Errorf("capture.json after update: recovered %v, stall %v, reason %q", back.Info.Recovered, back.Info.StallLen, back.Info.Reason)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, FileText)); string(b) != `recovered after 42s (profile "p")` {
		t.Errorf("report.txt after update: %q", b)
	}
	if got, want := names(t, dir), []string{FileInfo, FileProfile, FileText}; !reflect.DeepEqual(got, want) {
		t.Errorf("files after update %v, want %v (no temporaries)", got, want)
	}
	if err := r.Update("20990101T000000.000Z-1-stall", func(*model.Info) {}, nil); err == nil {
		t.Error("updating a missing capture succeeded")
	}
	if err := r.Update("../x", func(*model.Info) {}, nil); err == nil {
		t.Error("updating a name that is not a capture's succeeded")
	}
}

func TestPrune(t *testing.T) {
	root := t.TempDir()
	r := openRoot(t, root)
	info := NewInfo(model.Target{PID: 9}, model.Trigger{Kind: model.Stall})
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// Written out of time order: Prune goes by the time in the name.
	for _, min := range []int{3, 1, 4, 0, 2} {
		info.TriggerAt = base.Add(time.Duration(min) * time.Minute)
		if _, err := r.Write(&info, []File{text(FileProfile, "p")}); err != nil {
			t.Fatal(err)
		}
	}
	mustMkdir := func(name string, age time.Duration) {
		p := filepath.Join(root, name)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-age)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	mustMkdir("keep-me", 48*time.Hour)
	mustMkdir(tempPrefix+"stale", 2*time.Hour)
	mustMkdir(tempPrefix+"writing", time.Second)
	if err := os.WriteFile(filepath.Join(root, "20200101T000000.000Z-1-stall.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// A link named like an old capture, pointing at a directory that must
	// survive: Prune removes the link, never what it points at.
	victim := t.TempDir()
	if err := os.WriteFile(filepath.Join(victim, "precious"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(root, "20100101T000000.000Z-1-stall")); err != nil {
		t.Fatal(err)
	}

	// The oldest capture's upload is still queued: Prune spares it.
	spareName := "20260301T120000.000Z-9-stall"
	removed, spared, err := r.Prune(2, func(name string) bool { return name == spareName })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(spared, []string{spareName}) {
		t.Errorf("Prune(2) spared %v, want %v", spared, []string{spareName})
	}
	if _, err := os.Stat(filepath.Join(root, spareName)); err != nil {
		t.Errorf("a spared capture was removed: %v", err)
	}
	removed2, _, err := r.Prune(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	removed = append(removed2, removed...)
	want := []string{tempPrefix + "writing", "20100101T000000.000Z-1-stall", "20200101T000000.000Z-1-stall.txt", "20260301T120300.000Z-9-stall", "20260301T120400.000Z-9-stall", "keep-me"}
	if got := names(t, root); !reflect.DeepEqual(got, want) {
		t.Errorf("after Prune(2): %v, want %v", got, want)
	}
	if want := []string{"20260301T120000.000Z-9-stall", "20260301T120100.000Z-9-stall", "20260301T120200.000Z-9-stall"}; !reflect.DeepEqual(removed, want) {
		t.Errorf("Prune(2) says it removed %v, want %v", removed, want)
	}
	if _, err := os.Stat(filepath.Join(victim, "precious")); err != nil {
		t.Errorf("Prune followed a link: %v", err)
	}
	if removed, _, err := r.Prune(0, nil); err != nil || len(removed) != 0 || len(names(t, root)) != len(want) {
		t.Errorf("Prune(0) removed %v (%v)", removed, err)
	}
}

func TestDirName(t *testing.T) {
	at := time.Date(2026, 1, 5, 14, 30, 12, 345678901, time.FixedZone("CET", 3600))
	tests := []struct {
		info model.Info
		seq  int
		want string
	}{
		{model.Info{TriggerAt: at, PID: 12, Trigger: model.Stall}, 1, "20260105T133012.345Z-12-stall"},
		{model.Info{TriggerAt: at, PID: 12, Trigger: model.Signal}, 3, "20260105T133012.345Z-12-signal-3"},
		{model.Info{Start: at, PID: 12}, 1, "20260105T133012.345Z-12-manual"},
		{model.Info{TriggerAt: at, PID: 12, Trigger: "../../etc"}, 1, "20260105T133012.345Z-12-etc"},
	}
	for _, tt := range tests {
		got := DirName(&tt.info, tt.seq)
		if got != tt.want || !IsDirName(got) {
			t.Errorf("DirName(%+v, %d) = %s, want %s", tt.info, tt.seq, got, tt.want)
		}
	}
}

func TestOpenRootRefusesUnsafe(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err := OpenRoot(dir)
	if !errors.Is(err, safedir.ErrUnsafe) || !strings.Contains(err.Error(), "chmod go-w "+dir) {
		t.Fatalf("OpenRoot(world-writable) = %v, want an unsafe-directory error that says how to fix it", err)
	}
	// Created when missing, parents too.
	deep := filepath.Join(t.TempDir(), "a", "b", "captures")
	r := openRoot(t, deep)
	if st, err := os.Stat(deep); err != nil || st.Mode().Perm() != 0o755 || r.Path() != deep {
		t.Errorf("created root: %v, %v, path %s", st, err, r.Path())
	}
}

func TestOpenNotACapture(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); !errors.Is(err, ErrNoInfo) {
		t.Errorf("Open(empty dir) = %v, want ErrNoInfo", err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileInfo), []byte(`{"schema": 99}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "schema 99 is newer") {
		t.Errorf("Open(schema 99) = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileInfo), []byte(`{"schema": 1, "pid": "x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), FileInfo) {
		t.Errorf("Open(bad capture.json) = %v, want the file named", err)
	}
}

// TestWriteUnderAttack: a real unprivileged process (user nobody) swaps
// the entries of the output directory for links to a victim while root
// writes captures, as in the audit of issue 8. A directory it owns is
// refused before anything is written; a sticky shared one (/tmp's mode)
// is used, its planted links are never followed, and every capture lands
// in a directory of its own.
func TestWriteUnderAttack(t *testing.T) {
	r := testutil.StartRacer(t, false)
	if _, err := OpenRoot(r.Dir); !errors.Is(err, safedir.ErrUnsafe) || !strings.Contains(err.Error(), "chown 0 "+r.Dir) {
		t.Errorf("OpenRoot(a directory nobody owns) = %v, want ErrUnsafe with the fix", err)
	}
	r.Stop(t)
	r.CheckVictim(t)

	info := NewInfo(model.Target{PID: 4242}, model.Trigger{Kind: model.Stall, At: at})
	plant := []string{DirName(&info, 1), DirName(&info, 2), DirName(&info, 3)}
	r = testutil.StartRacer(t, true, plant...)
	root := openRoot(t, r.Dir)
	files := []File{text(FileProfile, "profile"), text(FileText, "report")}
	// Write until the racer has tried to move our directories (at least
	// 30 captures; a loaded machine may schedule it late).
	var dirs []string
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; ; i++ {
		if i >= 30 && i%10 == 0 {
			if _, refused := r.Counts(t); refused >= 10 || time.Now().After(deadline) {
				break
			}
		}
		dir, err := root.Write(&info, files)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
	}
	if _, refused := r.Stop(t); refused < 10 {
		t.Errorf("the racer tried to move our directories %d times in 2 minutes: the test proved little", refused)
	}
	for _, dir := range dirs {
		if slices.Contains(plant, filepath.Base(dir)) {
			t.Errorf("capture published under a planted link's name: %s", dir)
		}
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			t.Errorf("%s is not a directory: %v %v", dir, fi, err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, FileProfile)); err != nil || string(b) != "profile" {
			t.Errorf("%s: %q %v", dir, b, err)
		}
	}
	r.CheckVictim(t)
}
