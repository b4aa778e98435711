package kernelctx

import (
	"fmt"
	"strconv"
	"strings"
)

// MemCounters is what a memory cgroup's files say of its limit and of
// what hitting it cost, in either version.
type MemCounters struct {
	// Limit is the hard limit in bytes (v1 memory.limit_in_bytes, v2
	// memory.max) when Limited; High is v2's memory.high (reclaim and
	// throttling above it) when HighSet.
	Limit   uint64
	Limited bool
	High    uint64
	HighSet bool
	// Usage is the memory charged now (memory.usage_in_bytes,
	// memory.current).
	Usage uint64
	// Failcnt (v1) counts charges that hit the limit and had to reclaim.
	Failcnt uint64
	// OOMKills counts tasks the OOM killer killed for this cgroup (v1
	// memory.oom_control oom_kill, v2 memory.events oom_kill); UnderOOM
	// (v1) says the cgroup is out of memory now, its tasks stopped
	// (oom_kill_disable).
	OOMKills uint64
	UnderOOM bool
	// MaxEvents and HighEvents (v2 memory.events max, high) count
	// charges over memory.max that reclaim had to meet, and times over
	// memory.high that throttled the allocating task.
	MaxEvents, HighEvents uint64
	// MajorFaults (memory.stat pgmajfault) and, on v2, ScanDirect and
	// StealDirect (pages direct reclaim scanned and reclaimed in the
	// cgroup: its limit reclaim, which /proc/vmstat does not count).
	MajorFaults             uint64
	ScanDirect, StealDirect uint64
}

// v1Unlimited is the smallest v1 limit that means none: the kernel
// shows "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 on
// 4 KiB pages).
const v1Unlimited = 1 << 62

// ParseV1Limit parses memory.limit_in_bytes.
func ParseV1Limit(b []byte) (limit uint64, limited bool, err error) {
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("memory.limit_in_bytes %q: not a number", clip(b))
	}
	return v, v < v1Unlimited, nil
}

// ParseV2Limit parses memory.max or memory.high: bytes, or "max".
func ParseV2Limit(b []byte) (limit uint64, limited bool, err error) {
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%q: neither bytes nor \"max\"", clip(b))
	}
	return v, true, nil
}

// parseNumber parses a single-value file (memory.current,
// memory.usage_in_bytes, memory.failcnt).
func parseNumber(b []byte) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: not a number", clip(b))
	}
	return v, nil
}

// ParseOOMControl reads v1's memory.oom_control into c.
func ParseOOMControl(b []byte, c *MemCounters) {
	eachKeyed(b, func(k []byte, v uint64) {
		switch string(k) {
		case "under_oom":
			c.UnderOOM = v != 0
		case "oom_kill":
			c.OOMKills = v
		}
	})
}

// ParseMemoryEvents reads v2's memory.events into c.
func ParseMemoryEvents(b []byte, c *MemCounters) {
	eachKeyed(b, func(k []byte, v uint64) {
		switch string(k) {
		case "oom_kill":
			c.OOMKills = v
		case "max":
			c.MaxEvents = v
		case "high":
			c.HighEvents = v
		}
	})
}

// ParseMemoryStat reads memory.stat into c: v1's pgmajfault (the
// cgroup's own; total_pgmajfault would add its children's) and v2's
// pgmajfault, pgscan_direct and pgsteal_direct (hierarchical).
func ParseMemoryStat(b []byte, c *MemCounters) {
	eachKeyed(b, func(k []byte, v uint64) {
		switch string(k) {
		case "pgmajfault":
			c.MajorFaults = v
		case "pgscan_direct":
			c.ScanDirect = v
		case "pgsteal_direct":
			c.StealDirect = v
		}
	})
}
