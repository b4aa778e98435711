package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/stallwatch/stallwatch/internal/safedir"
)

// stateFile is what the daemon keeps across restarts, in state.json under
// the state directory: the times of the host's stall captures in the
// last hour, so that a daemon restarted in a loop does not capture past
// max-captures-per-hour.
type stateFile struct {
	dir *safedir.Dir // nil: nothing is kept
}

const stateName = "state.json"

type stateJSON struct {
	StallCaptures []time.Time `json:"stall_captures"`
}

func openState(path string) (*stateFile, error) {
	if path == "" {
		return &stateFile{}, nil
	}
	d, err := safedir.MkdirAll(path, 0o700)
	if err != nil {
		return nil, fmt.Errorf("state directory %s: %w", path, err)
	}
	return &stateFile{dir: d}, nil
}

func (s *stateFile) close() {
	if s.dir != nil {
		s.dir.Close()
	}
}

// history returns the saved stall captures since since.
func (s *stateFile) history(since time.Time) []time.Time {
	if s.dir == nil {
		return nil
	}
	b, err := s.dir.ReadFile(stateName, 1<<20)
	if err != nil {
		return nil
	}
	var st stateJSON
	if json.Unmarshal(b, &st) != nil {
		return nil
	}
	var h []time.Time
	now := time.Now()
	for _, t := range st.StallCaptures {
		if t.After(since) && !t.After(now) {
			h = append(h, t)
		}
	}
	return h
}

func (s *stateFile) saveHistory(h []time.Time) {
	if s.dir == nil {
		return
	}
	_ = s.dir.WriteFile(stateName, 0o600, func(w io.Writer) error {
		return json.NewEncoder(w).Encode(stateJSON{StallCaptures: h})
	})
}
