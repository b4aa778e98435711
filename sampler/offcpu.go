package sampler

import "github.com/stallwatch/stallwatch/internal/procfs"

// offTracker turns one thread's context-switch records into off-CPU
// intervals. A switch-out sample (the context-switches event, with the
// stack) comes first, then the PERF_RECORD_SWITCH out record (which says
// whether the thread was preempted), then, when the thread runs again, the
// switch-in record: the interval is [switch-out, switch-in].
//
// When observation begins the thread may already be off the CPU: begin
// opens an interval at that moment with the stack read from /proc (a
// "synthetic" interval), and a switch-in that arrives with nothing open
// before any switch-out means the thread was waiting since observation
// began.
type offTracker struct {
	watching bool
	begun    uint64 // when observation began
	switched bool   // a switch record was seen since begun
	runnable bool   // /proc showed it runnable (R) when observation began

	open      bool
	synthetic bool
	awaitOut  bool // the switch-out sample came, its record not yet
	iv        Sample
	broken    uint64 // intervals dropped because a record was lost

	// kernel is the synthetic interval's kernel stack as /proc names it,
	// turned into addresses by resolve only when the interval is read:
	// the kernel symbol table may still be loading when it opens.
	kernel  []procfs.KernelFrame
	resolve func([]procfs.KernelFrame) []uint64
}

// begin starts observing at time t. blocked, when not nil, is the thread
// as /proc saw it blocked just after the context-switch event was enabled;
// runnable says /proc saw it running or waiting for a CPU.
func (o *offTracker) begin(t uint64, blocked *Sample, runnable bool) {
	o.watch(t)
	o.adopt(blocked, runnable, nil, nil)
}

// watch starts observing at time t, before /proc has been looked at.
func (o *offTracker) watch(t uint64) {
	*o = offTracker{watching: true, begun: t, broken: o.broken}
}

// adopt gives the tracker what /proc showed of the thread just after
// observation began (see begin), with the blocked thread's kernel frames
// by name and the function that resolves them. It is ignored once a switch
// record has come: the records then tell the truth.
func (o *offTracker) adopt(blocked *Sample, runnable bool, kernel []procfs.KernelFrame, resolve func([]procfs.KernelFrame) []uint64) {
	if !o.watching || o.switched {
		return
	}
	o.runnable = runnable
	if blocked != nil {
		o.open, o.synthetic = true, true
		o.iv = *blocked
		o.iv.Kind, o.iv.Time, o.iv.Weight = OffCPU, o.begun, 0
		o.kernel, o.resolve = kernel, resolve
	}
}

// switchOutSample handles the context-switches sample: the thread leaves
// the CPU at s.Time with stack s.Stack.
func (o *offTracker) switchOutSample(s Sample) {
	if !o.watching {
		return
	}
	o.switched = true
	if o.open && !o.synthetic {
		// Still open: the switch-in of the last interval was lost.
		o.broken++
	}
	o.open, o.synthetic, o.awaitOut = true, false, true
	o.kernel = nil
	o.iv = s
	o.iv.Kind, o.iv.Weight, o.iv.Preempted = OffCPU, 0, false
}

// switchOut handles a PERF_RECORD_SWITCH out record at time t.
func (o *offTracker) switchOut(t uint64, preempted bool, pid, tid, cpu int32) {
	if !o.watching {
		return
	}
	o.switched = true
	if o.open && o.awaitOut {
		o.awaitOut = false
		o.iv.Preempted = preempted
		return
	}
	if o.open && !o.synthetic {
		o.broken++
	}
	// The sample was lost or throttled: an interval without a stack.
	o.open, o.synthetic, o.awaitOut = true, false, false
	o.iv = Sample{Kind: OffCPU, Time: t, PID: pid, TID: tid, CPU: cpu, Preempted: preempted}
}

// switchIn handles a switch-in record at t; it returns the interval that
// ended, if any.
func (o *offTracker) switchIn(t uint64, pid, tid int32) (Sample, bool) {
	if !o.watching {
		return Sample{}, false
	}
	first := !o.switched
	o.switched = true
	if o.open {
		return o.close(t), true
	}
	if first && t >= o.begun {
		// Off the CPU since before observation began, and /proc did not
		// show it blocked: it was waiting for a CPU (or woke in between).
		return Sample{Kind: OffCPU, Time: o.begun, Weight: t - o.begun, PID: pid, TID: tid, CPU: -1, Preempted: o.runnable}, true
	}
	return Sample{}, false
}

// close ends the open interval at t and returns it.
func (o *offTracker) close(t uint64) Sample {
	iv := o.withKernel()
	if t > iv.Time {
		iv.Weight = t - iv.Time
	}
	o.open, o.synthetic, o.awaitOut = false, false, false
	o.kernel = nil
	return iv
}

// withKernel returns the open interval, its kernel frames resolved if it
// is the synthetic one.
func (o *offTracker) withKernel() Sample {
	iv := o.iv
	if o.synthetic && len(o.kernel) > 0 && o.resolve != nil {
		k := o.resolve(o.kernel)
		o.kernel = nil
		o.iv.Stack = append(k, o.iv.Stack...)
		o.iv.Kernel = uint16(len(k))
		iv = o.iv
	}
	return iv
}

// end stops observing at t (off-CPU sampling turned off, or the thread
// exited) and returns the interval still open, if any.
func (o *offTracker) end(t uint64) (Sample, bool) {
	var iv Sample
	ok := o.watching && o.open
	if ok {
		iv = o.close(t)
	}
	o.watching, o.open = false, false
	return iv, ok
}

// current returns the open interval as if it ended at t, without closing it.
func (o *offTracker) current(t uint64) (Sample, bool) {
	if !o.watching || !o.open || t < o.iv.Time {
		return Sample{}, false
	}
	iv := o.withKernel()
	iv.Weight = t - iv.Time
	return iv, true
}
