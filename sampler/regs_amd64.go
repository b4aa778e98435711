package sampler

import "encoding/binary"

// x86-64 perf register numbers (arch/x86/include/uapi/asm/perf_regs.h):
// BP 6, SP 7, IP 8. The kernel writes the asked registers in bit order.
const userRegsMask = 1<<6 | 1<<7 | 1<<8

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
