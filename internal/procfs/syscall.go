package procfs

import (
	"fmt"
	"github.com/stallwatch/stallwatch/internal/hexnum"
	"strconv"
	"strings"
)

// Syscall is /proc/<pid>/task/<tid>/syscall: what the thread is doing in the
// kernel right now.
type Syscall struct {
	// Running is true when the thread is on a CPU (the file says
	// "running"); nothing else is then known.
	Running bool
	// NotInSyscall is true when the thread is in the kernel but not in a
	// system call (a page fault, an interrupt): only SP and PC are known.
	NotInSyscall bool
	Nr           int // -1 when NotInSyscall
	Args         [6]uint64
	// SP and PC are the user stack pointer and program counter saved at
	// kernel entry.
	SP, PC uint64
}

// ReadSyscall reads the thread's syscall file. It needs the same permission
// as ptrace attach (PTRACE_MODE_ATTACH_FSCREDS).
func ReadSyscall(pid, tid int) (Syscall, error) {
	b, err := readTask(pid, tid, "syscall")
	if err != nil {
		return Syscall{}, err
	}
	return ParseSyscall(string(b))
}

// ParseSyscall parses the text of a syscall file.
func ParseSyscall(text string) (Syscall, error) {
	var s Syscall
	f := strings.Fields(text)
	switch {
	case len(f) == 1 && f[0] == "running":
		s.Running = true
		s.Nr = -1
		return s, nil
	case len(f) == 3 && f[0] == "-1":
		s.NotInSyscall = true
		s.Nr = -1
		var err error
		if s.SP, err = parseHex(f[1]); err != nil {
			return s, err
		}
		s.PC, err = parseHex(f[2])
		return s, err
	case len(f) == 9:
		nr, err := strconv.Atoi(f[0])
		if err != nil {
			return s, fmt.Errorf("syscall: bad number %q", f[0])
		}
		s.Nr = nr
		for i := 0; i < 6; i++ {
			if s.Args[i], err = parseHex(f[1+i]); err != nil {
				return s, err
			}
		}
		if s.SP, err = parseHex(f[7]); err != nil {
			return s, err
		}
		s.PC, err = parseHex(f[8])
		return s, err
	}
	return s, fmt.Errorf("syscall: unexpected %q", strings.TrimSpace(text))
}

func parseHex(s string) (uint64, error) {
	v, ok := hexnum.Parse(s)
	if !ok {
		return 0, fmt.Errorf("syscall: bad hex %q", s)
	}
	return v, nil
}

// KernelFrame is one line of /proc/<pid>/task/<tid>/stack:
// "[<0>] do_nanosleep+0x75/0x160". Modern kernels print 0 for the address,
// so frames are known by name and offset.
type KernelFrame struct {
	Addr   uint64 // usually 0 (hidden by the kernel)
	Symbol string // "do_nanosleep"
	Offset uint64 // 0x75
	Size   uint64 // 0x160
	Module string // "[ext4]" when the symbol is in a module, else ""
}

// ReadKernelStack reads the thread's kernel stack, innermost frame first.
// It needs CAP_SYS_ADMIN; the kernel answers EACCES otherwise.
func ReadKernelStack(pid, tid int) ([]KernelFrame, error) {
	b, err := readTask(pid, tid, "stack")
	if err != nil {
		return nil, err
	}
	return ParseKernelStack(string(b)), nil
}

// ParseKernelStack parses the text of a stack file, skipping lines it does
// not understand.
func ParseKernelStack(text string) []KernelFrame {
	var frames []KernelFrame
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "[<") {
			continue
		}
		end := strings.Index(line, ">]")
		if end < 0 {
			continue
		}
		var kf KernelFrame
		kf.Addr, _ = hexnum.Parse(line[2:end])
		sym := strings.TrimSpace(line[end+2:])
		if i := strings.IndexByte(sym, ' '); i >= 0 {
			kf.Module = strings.TrimSpace(sym[i+1:])
			sym = sym[:i]
		}
		name, offs, _ := strings.Cut(sym, "+")
		kf.Symbol = name
		if off, size, ok := strings.Cut(offs, "/"); ok {
			kf.Offset, _ = hexnum.Parse(off)
			kf.Size, _ = hexnum.Parse(size)
		}
		if kf.Symbol != "" {
			frames = append(frames, kf)
		}
	}
	return frames
}
