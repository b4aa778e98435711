package jit

import (
	"fmt"
	"os"
	"syscall"
)

// Options tune how symbol files are read.
type Options struct {
	// ConvertTSC converts the time stamp counter values of a jitdump
	// written with the ARCH_TIMESTAMP flag into CLOCK_MONOTONIC
	// nanoseconds (see TSCConversion). Without it such a file's records
	// are indexed by their order alone: Loaded is 0 and the latest code
	// at an address wins at every time.
	ConvertTSC func(tsc uint64) uint64
	// Dirs are more directories, in the target's mount namespace, where
	// OpenProcess looks for jit-<pid>.dump when the target maps none.
	Dirs []string
	// LineTables keeps each jitdump symbol's CODE_DEBUG_INFO line table
	// for Index.LineAt (about 16 bytes per entry; writers emit one entry
	// per source position). Without it a symbol keeps its first line.
	LineTables bool
	// NoJitdump and NoPerfMap leave one kind of file alone (`stallwatch
	// jit tomap` must not read the perf map it writes).
	NoJitdump, NoPerfMap bool
}

// ReadFile reads a whole jitdump or perf map (told apart by the jitdump
// magic) into an Index. The file is taken as it stands — a perf map's last
// line counts without its newline — and its owner is not checked: the
// caller chose it. Defects are in the SourceInfo; the error is for files
// that cannot be read at all.
func ReadFile(path string, opts Options) (*Index, SourceInfo, error) {
	s, err := openFileSource(path)
	if err != nil {
		return nil, SourceInfo{}, err
	}
	defer s.close()
	s.configure(opts)
	var b builder
	err = s.ingest(&b, true)
	return b.index(), s.info, err
}

func openFileSource(path string) (*source, error) {
	// O_NONBLOCK: a FIFO named by mistake must not hang us in open.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fmt.Errorf("%s is not a regular file (%v)", path, fi.Mode().Type())
		}
		return nil, err
	}
	s, err := newSource(f, sniffKind(f), path, "file")
	if err != nil {
		f.Close()
		return nil, err
	}
	return s, nil
}
