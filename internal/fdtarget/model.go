package fdtarget

import (
	"github.com/stallwatch/stallwatch/model"
)

// Model is the target as the capture model keeps it (model.WaitTarget):
// what it is, what it is connected to and who is at the other end.
func (t *Target) Model() *model.WaitTarget {
	w := &model.WaitTarget{FD: t.FD, Kind: string(t.Kind), Desc: t.String()}
	switch t.Kind {
	case KindFile, KindDir, KindDevice, KindFIFO:
		w.Path, w.Device, w.DevMajor, w.DevMinor = t.Path, t.Device, t.DevMajor, t.DevMinor
	}
	if s := t.Socket; s != nil {
		w.Proto, w.State, w.Name, w.PeerName, w.NotAccepted = s.Proto, s.State, s.Name, s.PeerName, s.NotAccepted
		if s.Local.IsValid() {
			w.Local, w.Remote = s.Local.String(), s.Remote.String()
		}
		w.RecvQ, w.SendQ = s.RecvQ, s.SendQ
	}
	for _, h := range t.OtherEnds() {
		w.Peers = append(w.Peers, model.WaitPeer{PID: h.PID, Name: h.Name, FD: h.FD, State: h.State, Self: h.Self})
	}
	return w
}
