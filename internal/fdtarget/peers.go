package fdtarget

import "strconv"

// peers finds the processes at the other end of every pipe, FIFO and
// socket resolved, in one scan of every process's descriptors.
func (r *resolver) peers() {
	wants := map[*Target]string{} // target → the link its other end has
	for _, t := range r.all {
		switch {
		case t.Kind == KindPipe || t.Kind == KindFIFO:
			wants[t] = t.Link
		case t.Socket != nil && t.Socket.PeerInode != 0:
			wants[t] = "socket:[" + strconv.FormatUint(t.Socket.PeerInode, 10) + "]"
		}
	}
	if len(wants) == 0 {
		return
	}
	links := make([]string, 0, len(wants))
	for _, l := range wants {
		links = append(links, l)
	}
	s := newScan(r.pid, r.opts.MaxScan, links)
	s.run()
	r.res.Scanned, r.res.Processes = s.scanned, s.procs
	described := map[[2]int]Holder{}
	procs := map[int]*procInfo{}
	for t, link := range wants {
		for _, h := range s.found[link] {
			if h.Self && h.FD == t.FD {
				continue // this very descriptor
			}
			if len(t.Peers) == maxPeersEach {
				r.res.note("more than %d descriptors hold the other end of %s: the first %d are named", maxPeersEach, link, maxPeersEach)
				break
			}
			k := [2]int{h.PID, h.FD}
			d, ok := described[k]
			if !ok {
				d = h
				describeHolder(&d, r.opts.Syscall, procs)
				described[k] = d
			}
			t.Peers = append(t.Peers, d)
		}
		t.PeersSearched = !s.cut
	}
	if s.cut {
		r.res.note("the other ends of pipes and sockets were looked for in %d descriptors of %d processes (the bound) and not further: some may be unnamed", s.scanned, s.procs)
	}
}
