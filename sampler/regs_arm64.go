package sampler

import "encoding/binary"

// arm64 perf register numbers (arch/arm64/include/uapi/asm/perf_regs.h):
// X29 (the frame pointer) 29, SP 31, PC 32, written in bit order.
const userRegsMask = 1<<29 | 1<<31 | 1<<32

const userRegsCount = 3

func decodeRegs(raw []byte) UserRegs {
	if len(raw) < 8*userRegsCount {
		return UserRegs{}
	}
	return UserRegs{
		BP: binary.LittleEndian.Uint64(raw[0:]),
		SP: binary.LittleEndian.Uint64(raw[8:]),
		IP: binary.LittleEndian.Uint64(raw[16:]),
	}
}
