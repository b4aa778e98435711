package fdtarget

import (
	"bytes"
	"strconv"
	"strings"
	"time"
)

// Fdinfo is /proc/<pid>/fdinfo/<fd> (proc.rst 3.8): the descriptor's
// offset and open flags, and what its kind of file adds.
type Fdinfo struct {
	Pos   int64
	Flags int // open flags, as open(2) takes them
	MntID int
	Ino   uint64
	// Eventfd: the counter (hex in the file), its id, whether it is a
	// semaphore (Linux 6.7 and later print the last two).
	Eventfd *Eventfd
	// Sigmask is a signalfd's set of signals (bit n-1 for signal n).
	Sigmask    uint64
	HasSigmask bool
	Timerfd    *Timerfd
	// Epoll are an epoll set's items, at most maxEpollParsed of them;
	// EpollCount counts every "tfd:" line.
	Epoll      []EpollItem
	EpollCount int
	// Pid is a pidfd's process ("Pid:"; -1 once it exited, 0 unknown).
	Pid    int
	HasPid bool
}

// Eventfd is an eventfd's state.
type Eventfd struct {
	Count     uint64
	ID        int
	Semaphore bool
}

// Timerfd is a timerfd's settings: its clock (CLOCK_REALTIME 0,
// CLOCK_MONOTONIC 1, CLOCK_BOOTTIME 7, ...), expirations not yet read,
// timerfd_settime's flags (TFD_TIMER_ABSTIME 1), the time left to the
// next expiration and the interval (zero: once; both zero: disarmed).
type Timerfd struct {
	Clock    int
	Ticks    uint64
	Flags    int
	Value    time.Duration
	Interval time.Duration
}

// EpollItem is one "tfd:" line: a registered descriptor, the events
// watched, and the inode and device of the file registered (to tell
// whether the descriptor still refers to it).
type EpollItem struct {
	FD     int
	Events uint32
	Data   uint64
	Ino    uint64
	Sdev   uint64
}

// maxEpollParsed bounds the items of an epoll set kept; the rest are
// only counted.
const maxEpollParsed = 1024

// ParseFdinfo parses an fdinfo file. Lines it does not know (locks,
// inotify and fanotify marks, scm_fds, DMA buffers) are skipped; so are
// malformed ones.
func ParseFdinfo(b []byte) Fdinfo {
	var fi Fdinfo
	var tfd Timerfd
	hasTimer := false
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		val := strings.TrimSpace(string(v))
		switch string(k) {
		case "pos":
			fi.Pos, _ = strconv.ParseInt(val, 10, 64)
		case "flags":
			f, _ := strconv.ParseUint(val, 8, 32)
			fi.Flags = int(f)
		case "mnt_id":
			fi.MntID, _ = strconv.Atoi(val)
		case "ino":
			fi.Ino, _ = strconv.ParseUint(val, 10, 64)
		case "eventfd-count":
			if fi.Eventfd == nil {
				fi.Eventfd = &Eventfd{}
			}
			fi.Eventfd.Count, _ = strconv.ParseUint(val, 16, 64)
		case "eventfd-id":
			if fi.Eventfd != nil {
				fi.Eventfd.ID, _ = strconv.Atoi(val)
			}
		case "eventfd-semaphore":
			if fi.Eventfd != nil {
				fi.Eventfd.Semaphore = val == "1"
			}
		case "sigmask":
			if m, err := strconv.ParseUint(val, 16, 64); err == nil {
				fi.Sigmask, fi.HasSigmask = m, true
			}
		case "clockid":
			tfd.Clock, _ = strconv.Atoi(val)
			hasTimer = true
		case "ticks":
			tfd.Ticks, _ = strconv.ParseUint(val, 10, 64)
		case "settime flags":
			f, _ := strconv.ParseUint(val, 8, 32)
			tfd.Flags = int(f)
		case "it_value":
			tfd.Value = parseTimespecPair(val)
		case "it_interval":
			tfd.Interval = parseTimespecPair(val)
		case "tfd":
			fi.EpollCount++
			if len(fi.Epoll) < maxEpollParsed {
				if it, ok := parseEpollItem(val); ok {
					fi.Epoll = append(fi.Epoll, it)
				}
			}
		case "Pid":
			if p, err := strconv.Atoi(val); err == nil {
				fi.Pid, fi.HasPid = p, true
			}
		}
	}
	if hasTimer {
		fi.Timerfd = &tfd
	}
	return fi
}

// parseTimespecPair reads "(sec, nsec)".
func parseTimespecPair(s string) time.Duration {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "("), ")")
	sec, nsec, ok := strings.Cut(s, ",")
	if !ok {
		return 0
	}
	a, err1 := strconv.ParseInt(strings.TrimSpace(sec), 10, 64)
	b, err2 := strconv.ParseInt(strings.TrimSpace(nsec), 10, 64)
	if err1 != nil || err2 != nil || a < 0 || b < 0 || b >= 1e9 || a > 1<<33 {
		return 0
	}
	return time.Duration(a)*time.Second + time.Duration(b)
}

// parseEpollItem reads the rest of a "tfd:" line: "5 events: 1d data:
// ffffffffffffffff pos:0 ino:61af sdev:7" (fd decimal, the rest hex).
func parseEpollItem(s string) (EpollItem, bool) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return EpollItem{}, false
	}
	fd, err := strconv.Atoi(f[0])
	if err != nil || fd < 0 {
		return EpollItem{}, false
	}
	it := EpollItem{FD: fd}
	for i := 1; i < len(f); i++ {
		k, v, ok := strings.Cut(f[i], ":")
		if !ok {
			continue
		}
		if v == "" && i+1 < len(f) { // "events:       1d"
			i++
			v = f[i]
		}
		n, err := strconv.ParseUint(v, 16, 64)
		if err != nil {
			continue
		}
		switch k {
		case "events":
			it.Events = uint32(n)
		case "data":
			it.Data = n
		case "ino":
			it.Ino = n
		case "sdev":
			it.Sdev = n
		}
	}
	return it, true
}
