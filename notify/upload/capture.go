package upload

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"time"

	"github.com/stallwatch/stallwatch/capdir"
	"github.com/stallwatch/stallwatch/internal/safedir"
	"github.com/stallwatch/stallwatch/internal/version"
	"github.com/stallwatch/stallwatch/model"
	"github.com/stallwatch/stallwatch/notify/datadog"
	"github.com/stallwatch/stallwatch/runtimes"
)

// maxFile bounds a profile read from a capture directory: far above any
// capture's, far below what would hurt the host.
const maxFile = 256 << 20

// Load reads the upload of a capture directory: capture.json's facts, and
// profile.pb.gz and threads.pb.gz (when there is one) as they are. Files
// are read relative to the directory and never through a link: stallwatch
// reads as root, and what it reads goes to Datadog.
func Load(dir string) (*Profile, error) {
	d, err := capdir.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	defer d.Close()
	info := &d.Info
	p := &Profile{
		Start: info.Start, End: info.End,
		Tags:     CaptureTags(info),
		Hostname: info.Hostname, Kernel: info.Kernel,
		Runtime: runtimeOf(info),
	}
	if p.Start.IsZero() || p.End.Before(p.Start) {
		return nil, fmt.Errorf("upload: %s/%s: no sampled window (start %v, end %v)", dir, capdir.FileInfo, info.Start, info.End)
	}
	if p.Profile, err = d.ReadFile(capdir.FileProfile, maxFile); err != nil {
		return nil, fmt.Errorf("upload: %s: %w", dir, err)
	}
	if p.Threads, err = d.ReadFile(capdir.FileThreads, maxFile); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("upload: %s: %w", dir, err)
		}
		p.Threads = nil
	}
	return p, nil
}

// CaptureTags are the tags of one capture: language:native,
// profiler_version, process_id and pid, process, runtime when known,
// trigger, and stall_seconds when the capture belongs to a stall (its
// whole length once it recovered).
func CaptureTags(info *model.Info) []string {
	tags := ProcessTags(info.PID, info.Executable, info.Command, runtimeOf(info))
	if info.Trigger != "" {
		tags = append(tags, "trigger:"+datadog.TagValue(string(info.Trigger)))
	}
	stall := info.StallLen
	if stall == 0 {
		stall = info.StallFor
	}
	if stall > 0 {
		tags = append(tags, "stall_seconds:"+strconv.FormatFloat(stall.Round(time.Millisecond).Seconds(), 'f', -1, 64))
	}
	return tags
}

// ProcessTags are the tags that put every profile of one process —
// its continuous profile's periods and its captures — on one timeline:
// language:native, profiler_version, process_id and pid, process (the
// executable's name) and runtime (the analysis's, else the
// executable's: RuntimeOf) when known.
func ProcessTags(pid int, executable string, command []string, runtime string) []string {
	tags := []string{
		"language:native",
		"profiler_version:" + version.String(),
		"process_id:" + strconv.Itoa(pid),
		"pid:" + strconv.Itoa(pid),
	}
	if p := runtimes.ProcessName(executable, command, ""); p != "" {
		tags = append(tags, "process:"+datadog.TagValue(p))
	}
	if runtime != "" {
		tags = append(tags, "runtime:"+runtime)
	}
	return tags
}

// LoadFile reads the upload of one profile file (a continuous profile's
// period): the file, read through its directory and never through a
// link, and what p says of it.
func LoadFile(path string, p Profile) (*Profile, error) {
	d, err := safedir.OpenForRead(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("upload: %w", err)
	}
	defer d.Close()
	if p.Profile, err = d.ReadFile(filepath.Base(path), maxFile); err != nil {
		return nil, fmt.Errorf("upload: %s: %w", path, err)
	}
	if p.Start.IsZero() || p.End.Before(p.Start) {
		return nil, fmt.Errorf("upload: %s: no window (start %v, end %v)", path, p.Start, p.End)
	}
	return &p, nil
}

// runtimeOf is the capture's runtime as its analysis recognised it, else
// as its executable's name says (a capture.json written before the
// analysis said).
func runtimeOf(info *model.Info) string {
	if info.Runtime != "" {
		return info.Runtime
	}
	return RuntimeOf(info.Executable, info.Command)
}

// RuntimeOf names the runtime of a process from its executable (or its
// command's first word), as Datadog's `runtime` tag names it
// (runtimes.OfExecutable), or "" when the name does not say.
func RuntimeOf(executable string, command []string) string {
	name := executable
	if name == "" && len(command) > 0 {
		name = command[0]
	}
	if r := runtimes.OfExecutable(name); r != nil && name != "" {
		return r.ID
	}
	return ""
}
