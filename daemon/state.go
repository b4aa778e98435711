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
	// StallCaptures are the times alone, as a daemon before budgets by
	// owner wrote them (and reads them).
	StallCaptures []time.Time `json:"stall_captures"`
	// Captures are the same captures with their rule and user.
	Captures []spentJSON `json:"captures,omitempty"`
}

type spentJSON struct {
	At   time.Time `json:"at"`
	Rule string    `json:"rule"`
	UID  int       `json:"uid"`
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
func (s *stateFile) history(since time.Time) []spent {
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
	all := st.Captures
	if len(all) == 0 {
		for _, t := range st.StallCaptures {
			all = append(all, spentJSON{At: t, UID: -1})
		}
	}
	var h []spent
	now := time.Now()
	for _, c := range all {
		if c.At.After(since) && !c.At.After(now) {
			h = append(h, spent{At: c.At, owner: owner{Rule: c.Rule, UID: c.UID}})
		}
	}
	return h
}

func (s *stateFile) saveHistory(h []spent) {
	if s.dir == nil {
		return
	}
	st := stateJSON{StallCaptures: make([]time.Time, len(h)), Captures: make([]spentJSON, len(h))}
	for i, c := range h {
		st.StallCaptures[i] = c.At
		st.Captures[i] = spentJSON{At: c.At, Rule: c.Rule, UID: c.UID}
	}
	_ = s.dir.WriteFile(stateName, 0o600, func(w io.Writer) error {
		return json.NewEncoder(w).Encode(st)
	})
}
