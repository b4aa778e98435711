//go:build !amd64 && !arm64

package sampler

// Other architectures: no user registers are asked for, so no stack dump
// either (an unwinder could not start from it).
const userRegsMask = 0

const userRegsCount = 0

func decodeRegs(raw []byte) UserRegs { return UserRegs{} }
