package capture

import "github.com/stallwatch/stallwatch/runtimes"

// openAnnotator gives the samples the frames of a runtime that reads
// them as each sample arrives (runtimes.Sampled: CPython), the first the
// target runs; a runtime that cannot be read is a note, not a failure.
func (s *Session) openAnnotator() {
	if s.cfg.NativeOnly {
		return
	}
	for _, r := range s.tp.Readers() {
		sampled, ok := r.Instance.(runtimes.Sampled)
		switch {
		case r.Err != nil && readsSamples(r.Runtime.Reader):
			s.notes = append(s.notes, r.Runtime.Reader.NotRead()+": "+r.Err.Error())
		case ok && s.annot == nil:
			s.annot = sampled.Annotator()
		}
	}
}

func readsSamples(r runtimes.Reader) bool {
	sr, ok := r.(runtimes.SampleReader)
	return ok && sr.ReadsSamples()
}
