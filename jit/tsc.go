package jit

import "math/bits"

// TSCConversion turns time stamp counter values — the record times of a
// jitdump written with the ARCH_TIMESTAMP flag — into nanoseconds, with
// the time_mult, time_shift and time_zero fields of a perf event's mmap
// page (valid when its cap_user_time_zero bit is set). Those give the perf
// clock; Offset, CLOCK_MONOTONIC minus the perf clock as the caller
// measured it, moves the result onto the samples' clock.
//
//	jit.Options{ConvertTSC: jit.TSCConversion{Mult: m, Shift: s, Zero: z, Offset: off}.Nanos}
type TSCConversion struct {
	Mult   uint32
	Shift  uint16
	Zero   uint64
	Offset int64
}

// Nanos converts one TSC value: Zero + tsc*Mult >> Shift + Offset, with the
// product taken on 128 bits (perf's own formula splits it to the same end).
func (c TSCConversion) Nanos(tsc uint64) uint64 {
	hi, lo := bits.Mul64(tsc, uint64(c.Mult))
	var scaled uint64
	switch s := uint(c.Shift) % 64; {
	case s == 0:
		scaled = lo
	default:
		scaled = hi<<(64-s) | lo>>s
	}
	return uint64(int64(c.Zero+scaled) + c.Offset)
}
