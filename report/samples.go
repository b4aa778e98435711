package report

import (
	"encoding/binary"
	"strconv"
	"time"
	"unsafe"

	"github.com/google/pprof/profile"

	"github.com/stallwatch/stallwatch/model"
)

// Samples reads a profile's samples back into the capture model: what the
// findings are drawn from (package analysis), at capture time from the
// profile a capture writes and later from the one it wrote, so that both
// draw the same. A pprof sample with on-CPU time becomes an on-CPU
// sample, one with off-CPU time an off-CPU one (a sample of another
// profiler's with neither keeps its stack, weighing nothing); samples
// keep the profile's order, locations the profile's sharing.
func Samples(p *profile.Profile) *model.Profile {
	mp := &model.Profile{
		Meta:   model.Meta{Duration: time.Duration(p.DurationNanos), Period: p.Period, Comments: p.Comments},
		OnCPU:  hasType(p, model.TypeCPUTime),
		OffCPU: hasType(p, model.TypeOffCPUTime),
	}
	if p.TimeNanos != 0 {
		mp.Start = time.Unix(0, p.TimeNanos).UTC()
	}
	conv := newLocConverter(false)
	for _, m := range p.Mapping {
		mp.Mappings = append(mp.Mappings, conv.mapping(m, locationKind(&profile.Location{Mapping: m})))
	}
	index := func(typ string) int {
		if i, err := valueIndex(p, typ); err == nil && hasType(p, typ) {
			return i
		}
		return -1
	}
	cpuI, offI, countI := index(model.TypeCPUTime), index(model.TypeOffCPUTime), index(model.TypeCPUSamples)
	value := func(s *profile.Sample, i int) int64 {
		if i < 0 || i >= len(s.Value) {
			return 0
		}
		return s.Value[i]
	}
	// Samples of one stack share one slice of locations, as a capture's
	// do (sharing is by the profile's locations, one id each).
	stacks := map[string][]*model.Location{}
	var key []byte
	var labels sampleLabelCache
	mp.Samples = make([]model.Sample, 0, len(p.Sample))
	for _, s := range p.Sample {
		key = key[:0]
		for _, l := range s.Location {
			key = binary.AppendUvarint(key, l.ID)
		}
		stack, ok := stacks[string(key)]
		if !ok {
			stack = make([]*model.Location, len(s.Location))
			for i, l := range s.Location {
				stack[i] = conv.location(l)
			}
			stacks[string(key)] = stack
		}
		lb := labels.of(s)
		ms := model.Sample{Stack: stack, ThreadName: lb.name, Phase: lb.phase, TID: lb.tid, PID: lb.pid}
		ms.EndNanos, _ = numLabel(s, model.LabelEndTime)
		cpu, off := value(s, cpuI), value(s, offI)
		if cpu > 0 || off == 0 && lb.offCPU == "" {
			on := ms
			on.Count, on.Nanos = value(s, countI), cpu
			mp.Samples = append(mp.Samples, on)
		}
		if off > 0 || cpu == 0 && lb.offCPU != "" {
			ms.OffCPU, ms.Preempted, ms.Nanos = true, lb.offCPU == "preempted", off
			mp.Samples = append(mp.Samples, ms)
		}
	}
	return mp
}

// readLabels are the string labels a model.Sample takes from a pprof
// sample.
type readLabels struct {
	name, phase, offCPU string
	tid, pid            int
}

// sampleLabelCache reads samples' string labels once per Label map: the
// samples of a profile BuildProfile made share one per thread, phase and
// kind (a profile read from a file has one per sample, each read once).
type sampleLabelCache struct {
	byMap map[unsafe.Pointer]readLabels
}

func (c *sampleLabelCache) of(s *profile.Sample) readLabels {
	if len(s.Label) == 0 {
		return readLabels{}
	}
	id := mapIdentity(s.Label)
	if lb, ok := c.byMap[id]; ok {
		return lb
	}
	lb := readLabels{
		name:   label(s, model.LabelThreadName),
		phase:  label(s, model.LabelPhase),
		offCPU: label(s, model.LabelOffCPU),
	}
	lb.tid, _ = strconv.Atoi(label(s, model.LabelThreadID))
	lb.pid, _ = strconv.Atoi(label(s, model.LabelProcessID))
	if c.byMap == nil {
		c.byMap = map[unsafe.Pointer]readLabels{}
	}
	c.byMap[id] = lb
	return lb
}
